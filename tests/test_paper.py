"""Paper stage: the report renders every section from a small synthetic results set, every figure it
references exists, LaTeX special characters are escaped, and the PDF builds where latexmk is installed."""
import re
import shutil

import pytest
import yaml

from analysis import claims, facts, figures, synthetic
from analysis.catalog import FIGURES
from paper.publish import publish
from paper.render import BIBLIOGRAPHY, CITATION_FILE, citation_bibtex, read_bibliography, render, tex_escape

SECTIONS = ["Summary", "Setup", "Method", "Claims", "Ablations", "Threats to validity", "How to reproduce",
            "How to cite"]
REQUIRED_REFERENCES = {"dao2022flashattention", "dao2023flashattention2", "shah2024flashattention3",
                       "tillet2019triton", "milakov2018online", "rabe2021self"}


@pytest.fixture(scope="module")
def analysis_dir(tmp_path_factory):
    results = synthetic.write_results(tmp_path_factory.mktemp("results"))
    build = tmp_path_factory.mktemp("analysis")
    claims.main(str(results), str(build / "verdicts.json"), str(build / "claims.csv"))
    facts.main(str(results), str(build / "figures"), str(build / "facts.json"))
    for name in FIGURES:
        figures.main(name, str(results), str(build / "figures"))
    return build


@pytest.fixture(scope="module")
def report(analysis_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("paper")
    return out, render(analysis_dir, out, pdf=False)


def test_markdown_has_every_section_and_claim(report):
    text = report[1]["md"].read_text()
    for section in SECTIONS + ["References", "Appendix: provenance"]:
        assert f"\n## {section}" in text
    for claim in claims.read_claims():
        assert claim["title"] in text
    assert "synthetic" in text  # says where the numbers come from
    assert "host-bound" in text and "median over its repetitions" in text


def test_versions_are_one_line_per_host(analysis_dir, tmp_path):
    """A CPU interpreter's accuracy rows beside an archived GPU run: two software lines, and the intro sentence
    says which numbers came from where."""
    import json

    copy = tmp_path / "analysis"
    shutil.copytree(analysis_dir, copy)
    data = json.loads((copy / "facts.json").read_text())
    gpu = dict(data["setup"]["hosts"][0], source="archive:nvidia-h200", files="speed, ceiling")
    cpu = dict(gpu, kind="cpu-interpreter", gpu="no GPU", label="CPU, Triton's interpreter", source="measured",
               torch="2.11.0+cpu", files="accuracy")
    data["setup"]["hosts"] = [gpu, cpu]
    (copy / "facts.json").write_text(json.dumps(data))
    text = render(copy, tmp_path / "paper", pdf=False)["md"].read_text()
    assert text.count("**Software on") == 2 and "2.11.0+cpu" in text
    intro = text.split("## Summary")[0]
    assert "archived GPU run" in intro and "interpreter" in intro and gpu["commits"] in intro


def test_latex_has_every_section_and_claim(report):
    text = report[1]["tex"].read_text()
    for section in SECTIONS:
        assert f"\\section{{{section}}}" in text
    assert "\\appendix" in text and "\\bibliography{references}" in text
    for claim in claims.read_claims():
        assert tex_escape(claim["title"]) in text


def test_every_referenced_figure_exists(report):
    out, written = report
    markdown = re.findall(r"\]\((figures/[^)]+)\)", written["md"].read_text())
    latex = re.findall(r"\\includegraphics\[[^]]*\]\{([^}]+)\}", written["tex"].read_text())
    assert len(set(markdown)) == len(FIGURES) == len(set(latex))
    for path in markdown + latex:
        assert (out / path).is_file(), path


def test_render_fails_loudly_on_a_missing_figure(analysis_dir, tmp_path):
    copy = tmp_path / "analysis"
    shutil.copytree(analysis_dir, copy)
    (copy / "figures" / "memory.png").unlink()
    with pytest.raises(FileNotFoundError, match="memory.png"):
        render(copy, tmp_path / "paper", pdf=False)


@pytest.mark.parametrize("text, expected", [
    ("50% of peak & more", r"50\% of peak \& more"),
    ("fa1_both #1 {x} $5 ~ ^", r"fa1\_both \#1 \{x\} \$5 \textasciitilde{} \textasciicircum{}"),
    ("min >= 3", r"min \textgreater{}= 3"),
    ("C:\\path", r"C:\textbackslash{}path"),
])
def test_tex_escape(text, expected):
    assert tex_escape(text) == expected


def test_bibliography_and_citation():
    keys = {entry["key"] for entry in read_bibliography(BIBLIOGRAPHY)}
    assert REQUIRED_REFERENCES <= keys
    entry = citation_bibtex(yaml.safe_load(CITATION_FILE.read_text()))
    assert entry.startswith("@software{") and "title = " in entry


def test_publish_copies_markdown_and_png_figures(report, tmp_path):
    copies = publish(report[0], tmp_path / "published")
    names = {path.name for path in copies}
    assert "report.md" in names
    assert {f"{name}.png" for name in FIGURES} <= names


@pytest.mark.skipif(shutil.which("latexmk") is None, reason="latexmk not installed")
def test_pdf_builds(analysis_dir, tmp_path):
    written = render(analysis_dir, tmp_path, pdf=True)
    assert written["pdf"].stat().st_size > 10_000
    log = (tmp_path / "report.log").read_text(errors="replace")
    assert "undefined" not in re.sub(r"Font shape .* undefined", "", log).lower()


def test_publish_rewrites_the_readme_results_block(report, tmp_path):
    from paper.publish import BEGIN, END, update_readme

    published = tmp_path / "published"
    publish(report[0], published)
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nintro\n\n{BEGIN}\nstale\n{END}\n\n## After\n")
    update_readme(readme, published)
    text = readme.read_text()
    assert "stale" not in text and text.startswith("# Title") and text.rstrip().endswith("## After")
    assert "| Claim |" in text and "published/figures/speed_fwd_bwd.png" in text
    update_readme(readme, published)  # idempotent
    assert readme.read_text() == text
