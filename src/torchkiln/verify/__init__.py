"""``kiln verify``: prove on a real GPU that an image works.

``checks.py`` is the in-image check module (standard library + torch only, run as a script);
``runner.py`` starts it in an image through an engine or in the current Python; ``report.py``
reads its JSON report into typed objects and renders a table.
"""
