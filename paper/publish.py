"""Copy a built report into a folder for committing, and show its headline in the README.

    python -m paper.publish BUILD_DIR PUBLISHED_DIR [--readme README.md]

Copies report.md, report.pdf (when built) and the PNG figures. With --readme, rewrites the part
of the README between `<!-- results:begin -->` and `<!-- results:end -->` with the headline
figure, the claims table of the published report.md and links to it, so the README's numbers
are the report's and never typed by hand.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
from pathlib import Path

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
HEADLINE_FIGURE = "speed_fwd_bwd.png"


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


def summary_table(report_md: str) -> str:
    """The claims table under the report's '## Summary' heading."""
    section = report_md.split("## Summary", 1)[1]
    lines = [line for line in section.strip().splitlines()]
    table = []
    for line in lines:
        if not line.startswith("|"):
            if table:
                break
            continue
        table.append(line)
    if not table:
        raise ValueError("the report has no claims table under '## Summary'")
    return "\n".join(table)


def readme_block(published_dir: Path, readme_dir: Path) -> str:
    rel = Path(os.path.relpath(published_dir, readme_dir)).as_posix()
    report_md = (published_dir / "report.md").read_text()
    title = report_md.splitlines()[0].lstrip("# ").strip()
    links = f"[Markdown]({rel}/report.md)"
    if (published_dir / "report.pdf").exists():
        links += f" · [PDF]({rel}/report.pdf)"
    return "\n".join([
        BEGIN,
        f"## Results: {title}",
        "",
        f"![Forward+backward attention speed, every provider]({rel}/figures/{HEADLINE_FIGURE})",
        "",
        summary_table(report_md),
        "",
        f"The full report ({links}) shows each claim's figure, rule and reasoning, its method (repeated",
        "passes over each grid, host-bound and noisy cells kept out of verdicts, telemetry, memory net of what",
        "the process held) and its threats to validity. Verdicts are *holds*, *partly*, *does not hold*, or",
        "*not comparable* where the results cannot answer the paper's question. This section is written by",
        "`snakemake --cores 1 publish --config mode=archive accuracy_on_cpu=false` from the published report;",
        "do not edit it by hand.",
        END,
    ])


def update_readme(readme: str | Path, published_dir: str | Path) -> None:
    readme, published_dir = Path(readme), Path(published_dir)
    text = readme.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{readme} has no {BEGIN} ... {END} markers")
    block = readme_block(published_dir, readme.parent)
    readme.write_text(pattern.sub(lambda _: block, text, count=1))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("published_dir")
    parser.add_argument("--readme", help="README whose results block to rewrite")
    args = parser.parse_args(argv)
    for path in publish(args.build_dir, args.published_dir):
        print(path)
    if args.readme:
        update_readme(args.readme, args.published_dir)
        print(f"updated {args.readme}")


if __name__ == "__main__":
    main()
