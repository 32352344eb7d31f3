"""Image formats: reading and writing container images as files, and exporting them.

``meta`` understands manifests and configs (docker-archive, OCI layout; untrusted JSON checked
field by field); ``layers`` is one layer entry and the layer-diff rules (whiteouts, paths), once;
``archive`` reads an image file or layout by random access; ``stream`` reads an engine's ``save``
once from a pipe; ``storage`` reads an image in place from the engine's overlay layer folders;
``flatten`` applies layers to a directory; ``oci`` writes an OCI layout tar; ``sif`` reads and
writes the Singularity Image Format and apptainer's rootfs layout; ``export`` ties them into
``kiln export``. Nothing here extracts a whole image to inspect it; :mod:`torchkiln.inspect`
analyses what these readers yield.
"""
