"""Copy a built report into a folder for committing: report.md, report.pdf (when built) and the PNG figures.

    python -m paper.publish BUILD_DIR PUBLISHED_DIR
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path


def publish(build_dir: str | Path, published_dir: str | Path) -> list[Path]:
    build_dir, published_dir = Path(build_dir), Path(published_dir)
    (published_dir / "figures").mkdir(parents=True, exist_ok=True)
    sources = [build_dir / "report.md", *sorted((build_dir / "figures").glob("*.png"))]
    sources += [build_dir / "report.pdf"] if (build_dir / "report.pdf").exists() else []
    copies = []
    for source in sources:
        target = published_dir / source.relative_to(build_dir)
        shutil.copyfile(source, target)
        copies.append(target)
    return copies


if __name__ == "__main__":
    for path in publish(*sys.argv[1:3]):
        print(path)
