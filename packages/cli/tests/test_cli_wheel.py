"""The loom-cli wheel carries the console's static files, and the MCP SDK only as an extra."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_the_console_assets_and_keeps_mcp_an_extra(tmp_path):
    # when
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(PACKAGE)],
                   check=True, capture_output=True, timeout=120)
    (wheel,) = tmp_path.glob("loom_cli-*.whl")
    # then
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert {"loom_cli/console/static/console.js", "loom_cli/console/static/console.css",
            "loom_cli/console/server.py", "loom_cli/mcp_server.py", "loom_cli/sdk/__init__.py",
            "loom_cli/sdk/models.py"} <= names
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires == ["Requires-Dist: botocore>=1.34", "Requires-Dist: pydantic<3,>=2.6",
                        "Requires-Dist: mcp<3,>=2.3; extra == 'mcp'"], requires
