import os
import sys

# Make the staged package importable when pytest runs from a source checkout, unless
# LOOM_TEST_INSTALLED=1 asks for the installed package (scripts/pip-smoke.sh).
if os.environ.get("LOOM_TEST_INSTALLED") != "1":
    BUILD = os.environ.get("LOOM_BUILD_DIR",
                           os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    sys.path.insert(0, os.path.abspath(os.path.join(BUILD, "python")))
