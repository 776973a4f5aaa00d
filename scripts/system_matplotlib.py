"""Matplotlib for the project's plotting scripts (figures.py, plot_run.py), one behaviour for
both: Debian's python3-matplotlib lives in the system interpreter's packages, which another
python3 first in PATH (a virtualenv, pyenv) does not see. Without matplotlib, such an
interpreter re-executes the script under /usr/bin/python3; there (or with no system python)
the script says what to install and exits 2."""
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"


def import_matplotlib(script, argv, program):
    """matplotlib with the Agg backend, or re-exec under the system python, or exit 2."""
    try:
        import matplotlib
    except ImportError:
        in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
        other = os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)
        if (in_venv or other) and os.path.exists(SYSTEM_PYTHON):
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(script), *argv])
        print(f"{program}: matplotlib is missing: apt-get install python3-matplotlib "
              "(scripts/install_deps.sh)", file=sys.stderr)
        sys.exit(2)
    matplotlib.use("Agg")
    return matplotlib
