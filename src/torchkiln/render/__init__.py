"""Render a BuildPlan into text: a multi-stage Dockerfile and its context files, or an Apptainer definition."""

from torchkiln.render.dockerfile import context_files, render_dockerfile

__all__ = ["context_files", "render_dockerfile"]
