"""Render the report from the analysis outputs: Markdown, LaTeX, and the PDF where latexmk is installed.

Reads only analysis/build (verdicts.json, facts.json, figures/), the templates and bibliography beside
this file, and CITATION.cff; writes a self-contained build directory (report.md, report.tex,
references.bib, figures/, report.pdf). Both templates get the same context; the LaTeX one uses
\\BLOCK{...} and \\VAR{...} and escapes every string it prints.

    python -m paper.render ANALYSIS_BUILD_DIR OUT_DIR
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml
from markupsafe import Markup

PAPER_DIR = Path(__file__).parent
TEMPLATES_DIR = PAPER_DIR / "templates"
BIBLIOGRAPHY = PAPER_DIR / "references.bib"
CITATION_FILE = PAPER_DIR.parent / "CITATION.cff"
REPORTS = {"md": "report.md.j2", "tex": "report.tex.j2"}

_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "<": r"\textless{}", ">": r"\textgreater{}", "\u2013": "--", "\u2014": "---", "\u2212": "-",
                "\u00d7": r"$\times$", "\u00b7": r"$\cdot$", "\u00b2": r"$^2$", "\u2264": r"$\leq$", "\u2265": r"$\geq$", "\u2019": "'"}
_TEX_PATTERN = re.compile("|".join(re.escape(char) for char in _TEX_SPECIAL))


def tex_escape(value) -> str:
    """A value as LaTeX text: every character that LaTeX treats specially is escaped."""
    return _TEX_PATTERN.sub(lambda match: _TEX_SPECIAL[match.group()], str(value))


def read_bibliography(path: str | Path = BIBLIOGRAPHY) -> list[dict]:
    """The entries of a .bib file in file order: key, type, one item per field (braces removed) and venue."""
    text = Path(path).read_text()
    entries = []
    for match in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text):
        body, depth, position = [], 1, match.end()
        while depth:
            char = text[position]
            depth += {"{": 1, "}": -1}.get(char, 0)
            body.append(char)
            position += 1
        fields = {name.lower(): _plain(value)
                  for name, value in re.findall(r"(\w+)\s*=\s*(\{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\})", "".join(body))}
        fields["venue"] = fields.get("booktitle") or fields.get("journal", "")
        entries.append({"key": match.group(2), "type": match.group(1).lower(), **fields})
    return entries


def _plain(value: str) -> str:
    """A BibTeX field as plain text: outer braces, protective braces and simple accents removed."""
    value = re.sub(r"\\'\{?(\w)\}?", lambda m: {"e": "\u00e9", "a": "\u00e1", "o": "\u00f3"}.get(m.group(1), m.group(1)),
                   value[1:-1])
    value = value.replace("$O(n^2)$", "O(n^2)")
    return re.sub(r"[{}]", "", value)


def citation_authors(cff: dict) -> str:
    return " and ".join(author.get("name") or f"{author['given-names']} {author['family-names']}"
                        for author in cff["authors"])


def citation_bibtex(cff: dict) -> str:
    """A BibTeX entry for this repository, built from CITATION.cff so that there is one source for it."""
    authors = citation_authors(cff)
    fields = {"title": "{" + cff["title"] + "}", "author": "{" + authors + "}"}
    for source, target in (("version", "version"), ("repository-code", "url"), ("date-released", "year")):
        if cff.get(source):
            fields[target] = str(cff[source])[:4] if target == "year" else cff[source]
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields.items())
    return f"@software{{flashattention2_triton_replication,\n{body}\n}}"


class FigureUses:
    """Numbers figures in the order the report first shows them; later mentions refer back by number."""

    def __init__(self, figures: dict):
        self.figures, self.shown = figures, []

    def use(self, name: str) -> dict:
        first = name not in self.shown
        if first:
            self.shown.append(name)
        return {"name": name, "number": self.shown.index(name) + 1, "first": first, **self.figures[name]}


def _host_words(host: dict) -> str:
    commits = host["commits"] if host["commits"] != "-" else "no commit recorded"
    return f"{host['gpu']}, commit {commits}, measured {host['first'][:10]} to {host['last'][:10]}"


def source_note(setup: dict) -> str:
    """Where the numbers come from, in words: which host and run produced the performance numbers and which the
    accuracy numbers, from the results' `source`, `host_kind` and provenance columns."""
    parts = []
    for host in setup["hosts"]:
        source = host["source"]
        what = "the accuracy numbers" if host["kind"] == "cpu-interpreter" else "the performance numbers" + (
            " and the accuracy numbers" if "accuracy" in host["files"] else "")
        if host["kind"] == "cpu-interpreter":
            where = ("this host's CPU, in Triton's interpreter on small shapes" if source == "measured"
                     else f"a CPU host's Triton interpreter ({source})")
            parts.append(f"{what} come from {where}")
        elif source.startswith("archive:"):
            slug = source.removeprefix("archive:")
            parts.append(f"{what} come from the archived GPU run ({_host_words(host)}) committed under "
                         f"results/archive/{slug}/, not measured on the machine that built this report")
        elif source == "measured":
            parts.append(f"{what} come from this pipeline run's own measurements ({_host_words(host)})")
        else:
            parts.append(f"{what} come from rows marked '{source}', which are not measurements: this report only "
                         "shows the layout")
    text = "; ".join(parts) or "there are no results rows"
    return text[0].upper() + text[1:] + "."


def environment(kind: str) -> jinja2.Environment:
    common = dict(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
                  trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    if kind == "tex":
        env = jinja2.Environment(block_start_string=r"\BLOCK{", block_end_string="}", variable_start_string=r"\VAR{",
                                 variable_end_string="}", comment_start_string=r"\#{", comment_end_string="}",
                                 finalize=lambda value: value if isinstance(value, Markup) else tex_escape(value),
                                 **common)
        env.globals["cite"] = lambda *keys: Markup(r"\cite{" + ",".join(keys) + "}")
        env.filters["verbatim"] = Markup  # printed as it is: file names, labels, code blocks
    else:
        env = jinja2.Environment(**common)
    env.filters["num"] = lambda value, digits=0: "-" if value is None else f"{value:,.{digits}f}"
    return env


def context(analysis_dir: Path) -> dict:
    facts = json.loads((analysis_dir / "facts.json").read_text())
    bibliography = read_bibliography()
    numbers = {entry["key"]: index + 1 for index, entry in enumerate(bibliography)}
    cff = yaml.safe_load(CITATION_FILE.read_text())
    return {"claims": json.loads((analysis_dir / "verdicts.json").read_text()), **facts,
            "source_note": source_note(facts["setup"]), "bibliography": bibliography, "reference_numbers": numbers,
            "citation_bibtex": citation_bibtex(cff), "citation_authors": citation_authors(cff)}


def copy_figures(figures: dict, source_dir: Path, out_dir: Path) -> None:
    missing = [name for figure in figures.values() for name in figure["files"].values()
               if not (source_dir / name).exists()]
    if missing:
        raise FileNotFoundError(f"figures missing from {source_dir}: {missing}")
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    for figure in figures.values():
        for name in figure["files"].values():
            shutil.copyfile(source_dir / name, out_dir / "figures" / name)


def build_pdf(out_dir: Path) -> Path | None:
    """Run latexmk on report.tex in `out_dir`; None (and a message) where latexmk is not installed."""
    if shutil.which("latexmk") is None:
        print("latexmk not found: skipped report.pdf (install texlive-latex-recommended and latexmk)")
        return None
    run = subprocess.run(["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "report.tex"],
                         cwd=out_dir, capture_output=True, text=True)
    if run.returncode:
        log = (out_dir / "report.log").read_text(errors="replace") if (out_dir / "report.log").exists() else ""
        errors = [line for line in log.splitlines() if line.startswith("!")] or run.stdout.splitlines()[-20:]
        raise RuntimeError(f"latexmk failed on {out_dir / 'report.tex'}:\n" + "\n".join(errors))
    return out_dir / "report.pdf"


def render(analysis_dir: str | Path, out_dir: str | Path, pdf: bool = True) -> dict[str, Path]:
    analysis_dir, out_dir = Path(analysis_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    values = context(analysis_dir)
    copy_figures(values["figures"], analysis_dir / "figures", out_dir)
    shutil.copyfile(BIBLIOGRAPHY, out_dir / BIBLIOGRAPHY.name)
    written = {}
    for kind, template in REPORTS.items():
        text = environment(kind).get_template(template).render(figure_uses=FigureUses(values["figures"]), **values)
        written[kind] = out_dir / f"report.{kind}"
        written[kind].write_text(text)
    if pdf and (path := build_pdf(out_dir)):
        written["pdf"] = path
    return written


if __name__ == "__main__":
    for path in render(*sys.argv[1:3]).values():
        print(path)
