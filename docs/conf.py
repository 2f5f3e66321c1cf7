"""Sphinx configuration of the site: the user guide (``docs/guide/*.md``, Markdown through
myst-parser) and the API reference (``make docs``; CI builds it with warnings as errors)."""

import structtorch

project = "structtorch"
author = "structtorch developers"
copyright = "2026, structtorch developers"
release = structtorch.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon", "sphinx.ext.viewcode",
              "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_heading_anchors = 3  # the guide's links to its own sections (#the-training-loop-...)
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
autosummary_generate = False
nitpicky = False
html_theme = "alabaster"
exclude_patterns = ["_build"]
suppress_warnings = ["ref.python"]  # several modules re-export one name (e.g. st.viterbi)
