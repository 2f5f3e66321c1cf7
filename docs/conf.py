"""Sphinx configuration of the site: the user guide (``docs/guide/*.md``, Markdown through
myst-parser), the executed tutorials (``docs/tutorials/tutorial_*.py`` through sphinx-gallery, into
``docs/generated/tutorials``) and the API reference (``make docs``; CI builds it with warnings as
errors)."""

import importlib.util
import os

import structtorch

project = "structtorch"
author = "structtorch developers"
copyright = "2026, structtorch developers"
release = structtorch.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon", "sphinx.ext.viewcode",
              "myst_parser", "sphinx_gallery.gen_gallery"]
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
exclude_patterns = ["_build", "tutorials"]  # tutorials: the gallery's sources (its pages: generated/)
suppress_warnings = ["ref.python"]  # several modules re-export one name (e.g. st.viterbi)

# The tutorials: every docs/tutorials/tutorial_*.py runs at build time (in this process, one after
# the other, in file-name order) and its page shows the code, the printed output and the figures;
# an example that raises stops the build. STRUCTTORCH_TUTORIALS=<regex> executes only the matching
# files (the others are rendered without output), e.g. STRUCTTORCH_TUTORIALS='tutorial_[ac]' while
# writing one. Execution times: docs/sg_execution_times.rst after a build.
_matplotlib = importlib.util.find_spec("matplotlib") is not None
sphinx_gallery_conf = {
    "examples_dirs": "tutorials",
    "gallery_dirs": "generated/tutorials",
    "filename_pattern": os.environ.get("STRUCTTORCH_TUTORIALS", r"tutorial_"),
    "ignore_pattern": r"__init__\.py",
    "abort_on_example_error": True,
    "image_scrapers": ("matplotlib",) if _matplotlib else (),
    "reset_modules": ("matplotlib",) if _matplotlib else (),
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_signature": False,
}
