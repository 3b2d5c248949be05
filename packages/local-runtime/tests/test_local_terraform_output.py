"""The Terraform output the local runtime shows: the warnings a newcomer sees are explained where they appear."""

from __future__ import annotations

import io
import os
import stat
import sys

from loom_local import terraform


def test_expected_warnings_are_followed_by_why_they_are_expected(tmp_path):
    # given: a stand-in terraform that prints what an apply on the local stack prints
    fake = tmp_path / "terraform"
    fake.write_text(f"#!{sys.executable}\n"
                    "print('module.loom.module.table.aws_dynamodb_table.this[0]: Creating...')\n"
                    "print('\\x1b[33mWarning: Check block assertion failed\\x1b[0m')\n"
                    "print('Apply complete! Resources: 1 added, 0 changed, 0 destroyed.')\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    shown: list[str] = []
    # when
    terraform._run([str(fake)], dict(os.environ), io.StringIO(), shown.append, timeout_s=30)
    # then
    warning = shown.index("Warning: Check block assertion failed")
    assert "lease_s=5" in shown[warning + 1] and shown[-1].startswith("Apply complete")
