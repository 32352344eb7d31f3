"""Building an image from a plan: the build context, the package sources, offline base images, and the
pipeline that runs an engine's build (see docs/architecture.md)."""
