"""Paper stage: the report renders every section from a small synthetic results set, both formats from one
source of content, every figure it references exists, LaTeX special characters are escaped, and the PDF
builds where latexmk is installed."""
import re
import shutil

import pytest
import yaml

from analysis import claims, facts, figures, synthetic
from analysis.catalog import FIGURES
from paper.publish import publish
from paper.render import (BIBLIOGRAPHY, CITATION_FILE, LaTeX, Markdown, citation_bibtex, content_environment,
                          read_bibliography, render, tex_escape)

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


def test_both_formats_have_the_same_sections_in_the_same_order(report):
    """One source: every heading of report.md is a (sub)section of report.tex, in the same order."""
    markdown = [(len(hashes), re.sub(r"^\d+\. ", "", title))
                for hashes, title in re.findall(r"^(##+) (.+)$", report[1]["md"].read_text(), re.MULTILINE)
                if title != "References"]  # LaTeX's \bibliography prints its own heading
    latex = [(2 if kind == "section" else 3, title)
             for kind, title in re.findall(r"^\\(section|subsection)\{(.+)\}$", report[1]["tex"].read_text(),
                                           re.MULTILINE)]
    assert [(level, tex_escape(title.replace("Appendix: provenance", "Provenance"))) for level, title in markdown] \
        == latex
    assert len(latex) > len(SECTIONS) + len(claims.read_claims())


def test_neither_format_leaks_into_the_other(report):
    markdown, latex = report[1]["md"].read_text(), report[1]["tex"].read_text()
    assert not re.search(r"\\(textbf|emph|texttt|begin|item|cite)\b", markdown)
    assert "**" not in latex and "](" not in latex and "`" not in latex and "\n## " not in latex


@pytest.mark.parametrize("flavour, expected", [
    (Markdown, "50% of `a_b` & x_y, **C:\\path** [[1]](#ref-k)"),
    (LaTeX, r"50\% of \texttt{a\_b} \& x\_y, \textbf{C:\textbackslash{}path} \cite{k}"),
])
def test_prose_and_values_are_escaped_helper_output_is_not(flavour, expected):
    """Literal text in the content template is escaped like printed values; what helpers return is kept."""
    env = content_environment(flavour({}, [{"key": "k"}]))
    text = env.from_string("50% of {{ code('a_b') }} & {{ value }}, {{ bold(['C:', path]) }} {{ cite('k') }}")
    assert text.render(value="x_y", path="\\path") == expected


def test_table_and_list_helpers():
    source = """{% call table(["Name", "Value"], columns="p{0.3}r", caption="Some 50% values.", long=True) %}
{{ row("a|b", 1) }}
{{ row(code("c_d"), 2) }}
{% endcall %}

{% call bullets() %}
{% call item("Paper") %}one{% endcall %}

{% call item("Ours") %}two{% endcall %}
{% endcall %}

{{ bullets(["x & y"]) }}"""
    markdown = content_environment(Markdown({}, [])).from_string(source).render()
    assert markdown == ("Some 50% values:\n\n| Name | Value |\n|---|---:|\n| a\\|b | 1 |\n| `c_d` | 2 |\n\n"
                        "- **Paper**: one\n- **Ours**: two\n\n- x & y")
    latex = content_environment(LaTeX({}, [])).from_string(source).render()
    assert "\\begin{longtable}{@{}p{0.3\\linewidth}r@{}}\n\\caption{Some 50\\% values.}\\\\" in latex
    assert "a\\textbar{}b & 1 \\\\\n\\texttt{c\\_d} & 2 \\\\" in latex
    assert "\\begin{description}\n\\item[Paper] one\n\\item[Ours] two\n\\end{description}" in latex
    assert latex.endswith("\\begin{itemize}\n\\item x \\& y\n\\end{itemize}")
    with pytest.raises(ValueError, match="column spec"):
        content_environment(LaTeX({}, [])).from_string(source.replace("p{0.3}r", "p{3cm}r")).render()


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
    ("a | b", r"a \textbar{} b"),
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


def test_report_says_features_were_not_measured_without_their_results(analysis_dir, tmp_path):
    results = synthetic.write_results(tmp_path / "results")
    (results / "features.csv").unlink()
    build = tmp_path / "analysis"
    shutil.copytree(analysis_dir / "figures", build / "figures")
    claims.main(str(results), str(build / "verdicts.json"), str(build / "claims.csv"))
    facts.main(str(results), str(build / "figures"), str(build / "facts.json"))
    figures.main("features", str(results), str(build / "figures"))
    out = render(build, tmp_path / "paper", pdf=False)
    for fmt in ("md", "tex"):
        text = out[fmt].read_text()
        assert "features: not measured in the archived run yet" in text
        assert "Beyond the paper" in text and "None" not in text


def test_report_has_the_jit_table_and_says_when_it_was_not_measured(report, analysis_dir, tmp_path):
    for fmt in ("md", "tex"):
        text = report[1][fmt].read_text()
        assert "First-call cost: JIT compilation" in text and "jit: not measured" not in text
        assert "TRITON" in text and ".triton/cache" in text
    markdown = report[1]["md"].read_text()
    assert re.search(r"\| 128 \| causal \| [0-9.]+ \([0-9.]+-[0-9.]+\) \|", markdown)
    assert re.search(r"took [0-9.]+-[0-9.]+ s for its first forward and first backward together", markdown)
    results = synthetic.write_results(tmp_path / "results")
    (results / "jit.csv").unlink()
    build = tmp_path / "analysis"
    shutil.copytree(analysis_dir, build)
    facts.main(str(results), str(build / "figures"), str(build / "facts.json"))
    out = render(build, tmp_path / "paper", pdf=False)
    for fmt in ("md", "tex"):
        text = out[fmt].read_text()
        assert "jit: not measured in the archived run yet" in text and "None" not in text


def test_report_has_the_fp8_section_and_says_when_it_was_not_measured(report, analysis_dir, tmp_path):
    for fmt in ("md", "tex"):
        text = report[1][fmt].read_text()
        assert "Beyond the paper: fp8 forward" in text and "fp8: not measured" not in text
        assert "float64 attention of the dequantised inputs" in text and "None" not in text
    markdown = report[1]["md"].read_text()
    assert f"= {synthetic.TOKENS} tokens, heads x head dim = {synthetic.HIDDEN}" in markdown
    assert re.search(r"\| 128 \| causal( \| [0-9.]+x){5} \|", markdown)  # a ratio per sequence length
    assert re.search(r"\| 64 \| full \| batch 1, 16 heads, 1024 x 1024 \| fp8 \(e4m3\) \| [0-9.]+e-0[0-9] \|",
                     markdown)
    assert re.search(r"relative RMS error is [0-9.]+ times fp16's and [0-9.]+ times bf16's", markdown)
    assert "figures/fp8.png" in markdown
    # the archive without fp8.csv: the section, its figure and the appendix say so, the rest renders as before
    results = synthetic.write_results(tmp_path / "results")
    (results / "fp8.csv").unlink()
    build = tmp_path / "analysis"
    shutil.copytree(analysis_dir, build)
    claims.main(str(results), str(build / "verdicts.json"), str(build / "claims.csv"))
    facts.main(str(results), str(build / "figures"), str(build / "facts.json"))
    figures.main("fp8", str(results), str(build / "figures"))
    out = render(build, tmp_path / "paper", pdf=False)
    for fmt in ("md", "tex"):
        text = out[fmt].read_text()
        assert "Beyond the paper: fp8 forward" in text and "None" not in text
        assert "fp8: not measured in the archived run yet (its rows come from" in text
        assert "Relative RMS error" not in text
    markdown = out["md"].read_text()
    summary = next(line for line in markdown.splitlines() if "fp8 (e4m3) forward at head dim 128" in line)
    assert "fp8: not measured in the archived run yet" in summary and "**no data**" in summary


def test_report_tables_read_cells_and_list_every_results_file(report):
    """The tile table counts configurations, the decode section says its bandwidth is over the GPU time, the
    method prints the host-bound threshold, and the appendix lists the files beside the ablations' results."""
    markdown = report[1]["md"].read_text()
    assert re.search(r"\| forward \| 128 \| fp16 \|( [0-9]+ \|){4} [0-9.]+ \| [0-9.]+x \| 36 \|", markdown)
    assert "over the cell's median GPU time (gpu_ms" in markdown
    assert "by more than 10% (experiments/measure.py, HOST_BOUND_EXCESS)" in markdown
    appendix = markdown.split("## Appendix: provenance")[1]
    for name in ("jit", "training_loss", "training", "speed"):
        assert f"`results/{name}.csv`" in appendix
