"""Render a BuildPlan into text: a Dockerfile and its build context (pure), written by write_context."""

from torchkiln.render.context import context_files, write_context
from torchkiln.render.dockerfile import render_dockerfile

__all__ = ["context_files", "render_dockerfile", "write_context"]
