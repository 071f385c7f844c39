"""The published numbers are this checkout's: the README and the published report name the commit the GPU
archive was measured at (results/archive/<gpu>/provenance.json), and the kernels here are that commit's.

A kernel change that can move a number is re-measured and republished before it lands on main; until then
the last test here fails, naming the files that differ from the archive's commit."""
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "results" / "archive" / "nvidia-h200"
PUBLISHED = ROOT / "paper" / "published" / "h200" / "report.md"


@pytest.fixture(scope="module")
def provenance():
    data = json.loads((ARCHIVE / "provenance.json").read_text())
    assert data["commit"] == [data["run_commit"]], "every row of the archive names the commit it ran"
    return data


def test_every_archived_file_is_the_one_provenance_describes(provenance):
    for name, described in provenance["files"].items():
        digest = hashlib.sha256((ARCHIVE / name).read_bytes()).hexdigest()
        assert digest == described["sha256"], f"{name} changed after it was archived"


def test_readme_and_published_report_name_the_archive_commit(provenance):
    commit = provenance["run_commit"]
    readme = (ROOT / "README.md").read_text()
    named = re.search(r"The archive above was measured at commit ([0-9a-f]{7,40})", readme)
    assert named, "the README says which commit its archive was measured at"
    assert commit.startswith(named.group(1)), (named.group(1), commit)
    assert f"commit {commit}" in PUBLISHED.read_text(), "the published report names the archive's commit"


def _git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def test_the_kernels_are_the_ones_the_archive_measured(provenance):
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    commit = provenance["run_commit"]
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        pytest.skip(f"the archive's commit {commit[:7]} is not in this clone's history (shallow clone?)")
    changed = _git("diff", "--name-only", commit, "--", "kernels").stdout.split()  # tracked files only
    assert not changed, (f"kernels/ differs from the archived commit {commit[:7]}: re-measure the grid on the H200 and "
                         f"republish, or keep the change off main: {changed}")
