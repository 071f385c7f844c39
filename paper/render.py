"""Render the report from the analysis outputs: Markdown, LaTeX, and the PDF where latexmk is installed.

Reads only analysis/build (verdicts.json, facts.json, figures/), the templates and bibliography beside
this file, and CITATION.cff; writes a self-contained build directory (report.md, report.tex,
references.bib, figures/, report.pdf).

    python -m paper.render ANALYSIS_BUILD_DIR OUT_DIR

One source, two formats. The report's content (every section, its prose, tables and figure
references) lives once, in templates/sections.j2. That template never writes Markdown or LaTeX
syntax itself: it calls a small set of helpers (`heading`, `table` and `row`, `figure`, `bullets`
and `item`, `bold`, `emph`, `code`, `cite`, `link`, `math`, `code_block`, `references`, ...), and
render() renders it twice, once with the Markdown helpers and once with the LaTeX ones (the
`Markdown` and `LaTeX` classes below, one method per helper). The two results are then placed in
thin document shells: templates/report.md.j2 (nothing around the body) and templates/report.tex.j2
(the preamble and `\\begin{document}`; its \\BLOCK{...}/\\VAR{...} delimiters keep jinja out of
LaTeX's braces).

Escaping is the LaTeX helpers' job, and it is automatic: every string the content template prints,
its literal prose included, goes through the flavour's `text` (tex_escape for LaTeX, unchanged for
Markdown), except what a helper returned, which is already in the target format (marked with
markupsafe's Markup). So a helper's text arguments are plain strings, or lists that mix strings and
other helpers' output, e.g. `table(..., caption=["Rules in ", code("claims.yaml"), "."])`; joining
helper output to a string with jinja's `~` would lose that mark and escape it a second time.

What is left to each format is only how a thing looks: a table is a float (or a longtable) with
its caption in LaTeX and a pipe table led in by its caption in Markdown; a figure is a float
that every mention refers to in LaTeX and an inline image at its first mention in Markdown;
citations are BibTeX keys in LaTeX and numbered links to a reference list in Markdown. The
section content decides nothing of that.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import jinja2.ext
import yaml
from jinja2.lexer import Token
from markupsafe import Markup

PAPER_DIR = Path(__file__).parent
TEMPLATES_DIR = PAPER_DIR / "templates"
BIBLIOGRAPHY = PAPER_DIR / "references.bib"
CITATION_FILE = PAPER_DIR.parent / "CITATION.cff"
CONTENT = "sections.j2"  # the report's sections, written once
SHELLS = {"md": "report.md.j2", "tex": "report.tex.j2"}  # the document around them, per format

_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
                "\u2013": "--", "\u2014": "---", "\u2212": "-",
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
    first, last = host["first"][:10], host["last"][:10]
    when = f"on {first}" if first == last else f"{first} to {last}"
    return f"{host['gpu']}, commit {commits}, measured {when}"


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


def number(value, digits: int = 0) -> str:
    """A number with thousands separators and `digits` decimals; '-' for a missing value."""
    return "-" if value is None else f"{value:,.{digits}f}"


class Flavour:
    """The helpers that templates/sections.j2 calls, for one output format. Subclasses say how each
    thing is written; every helper returns Markup (text already in the target format), every text
    argument is a string (escaped by `text`) or a list of strings and helper outputs. Helpers used as
    {% call %} blocks (abstract, bullets, item, table) take the block's rendered text from `caller`."""

    def __init__(self, figures: dict, bibliography: list[dict]):
        self.figure_uses = FigureUses(figures)
        self.bibliography = bibliography
        self.reference_numbers = {entry["key"]: index + 1 for index, entry in enumerate(bibliography)}

    def escape(self, value: str) -> str:
        raise NotImplementedError

    def text(self, value) -> Markup:
        """A value in the target format: helper output as it is, a list piece by piece, anything else escaped."""
        if isinstance(value, Markup):
            return value
        if isinstance(value, (list, tuple)):
            return Markup("".join(self.text(piece) for piece in value))
        return Markup(self.escape(str(value)))

    def bullets(self, items=(), caller=None) -> Markup:
        """A list: of `items` (plain strings), or of the item() calls inside a {% call bullets() %} block."""
        lines = [self._list_item(None, self.text(item)) for item in items] if caller is None else _lines(caller())
        text = self._list(lines)
        return Markup(text) if caller is None else _block(text)

    def item(self, label=None, caller=None) -> Markup:
        """One item of a {% call bullets() %} block, itself a {% call item() %} block; `label` leads it in."""
        return _block(self._list_item(label, caller().strip()))

    def _list(self, lines: list[str]) -> str:
        raise NotImplementedError

    def _list_item(self, label, body: str) -> str:
        raise NotImplementedError

    def helpers(self) -> dict:
        names = ("title", "abstract", "heading", "appendix", "bold", "emph", "code", "link", "math", "cite",
                 "bullets", "item", "table", "row", "figure", "code_block", "references")
        return {name: getattr(self, name) for name in names}


class Markdown(Flavour):
    def escape(self, value: str) -> str:
        return value

    def title(self, text, authors) -> Markup:
        """The title as the first heading; the authors are in How to cite (CITATION.cff)."""
        return Markup(f"# {self.text(text)}")

    def abstract(self, caller) -> Markup:
        return _block(caller().strip())

    def heading(self, level: int, text, number: int | None = None) -> Markup:
        """`number` is shown in Markdown only; LaTeX numbers its sections itself."""
        return Markup("#" * level + " " + (f"{number}. " if number is not None else "") + self.text(text))

    def appendix(self, title) -> Markup:
        return Markup(f"## Appendix: {self.text(title)}")

    def bold(self, text) -> Markup:
        return Markup(f"**{self.text(text)}**")

    def emph(self, text) -> Markup:
        return Markup(f"*{self.text(text)}*")

    def code(self, text) -> Markup:
        return Markup(f"`{self.text(text)}`")

    def link(self, url) -> Markup:
        return Markup(f"<{url}>")

    def math(self, formula) -> Markup:
        return Markup(formula)

    def cite(self, *keys) -> Markup:
        return Markup(", ".join(f"[[{self.reference_numbers[key]}]](#ref-{key})" for key in keys))

    def _list(self, lines: list[str]) -> str:
        return "\n".join(lines)

    def _list_item(self, label, body: str) -> str:
        return "- " + (f"**{self.text(label)}**: " if label else "") + body

    def table(self, header: list, columns: str, caption=None, size: str = "small", long: bool = False,
              caller=None) -> Markup:
        """A table of the row() calls in the {% call table(...) %} block, its column alignment from `columns`
        (see _columns); the caption leads into it."""
        align = ["---:" if column == "r" else "---" for column in _columns(columns)]
        lines = [f"{self.text(caption).removesuffix('.')}:", ""] if caption else []
        lines += [self.row(*header), "|" + "|".join(align) + "|", caller().strip()]
        return _block("\n".join(lines))

    def row(self, *cells) -> Markup:
        return Markup("| " + " | ".join(self.text(cell).replace("|", "\\|") for cell in cells) + " |")

    def figure(self, name: str) -> Markup:
        """The figure where it is first used (image and caption), a reference back to it afterwards."""
        figure = self.figure_uses.use(name)
        if not figure["first"]:
            return Markup(f"See Figure {figure['number']}.")
        number, png, caption = figure["number"], figure["files"]["png"], self.text(figure["caption"])
        return Markup(f"![Figure {number}: {caption}](figures/{png})\n\n"
                      f"*Figure {number} (`figures/{png}`): {caption}*")

    def code_block(self, language: str, lines) -> Markup:
        code = lines if isinstance(lines, str) else "\n".join(lines)
        return Markup(f"```{language}\n{code}\n```")

    def references(self) -> Markup:
        """The reference list under its own heading, each entry the target of its citations' links."""
        entries = [f'<a id="ref-{entry["key"]}"></a>[{number}] {entry["author"]}. *{entry["title"]}*. '
                   f'{entry["venue"]}, {entry["year"]}. <{entry["url"]}>'
                   for number, entry in enumerate(self.bibliography, start=1)]
        return Markup("## References\n\n" + "\n\n".join(entries))


class LaTeX(Flavour):
    SECTIONS = {1: "section", 2: "section", 3: "subsection", 4: "subsubsection"}

    def escape(self, value: str) -> str:
        return tex_escape(value)

    def title(self, text, authors) -> Markup:
        return Markup(f"\\title{{{self.text(text)}}}\n\\author{{{self.text(authors)}}}\n\\date{{}}\n\\maketitle")

    def abstract(self, caller) -> Markup:
        return _block(f"\\begin{{abstract}}\n{caller().strip()}\n\\end{{abstract}}")

    def heading(self, level: int, text, number: int | None = None) -> Markup:
        return Markup(f"\\{self.SECTIONS[level]}{{{self.text(text)}}}")

    def appendix(self, title) -> Markup:
        """`title` reads after 'Appendix: ' in Markdown; here it heads a lettered section, so it is capitalised."""
        title = self.text(title)
        return Markup(f"\\appendix\n\\section{{{title[:1].upper()}{title[1:]}}}")

    def bold(self, text) -> Markup:
        return Markup(f"\\textbf{{{self.text(text)}}}")

    def emph(self, text) -> Markup:
        return Markup(f"\\emph{{{self.text(text)}}}")

    def code(self, text) -> Markup:
        return Markup(f"\\texttt{{{self.text(text)}}}")

    def link(self, url) -> Markup:
        return Markup("\\url{" + re.sub(r"([%#])", r"\\\1", str(url)) + "}")

    def math(self, formula) -> Markup:
        return Markup(f"${formula}$")

    def cite(self, *keys) -> Markup:
        return Markup(f"\\cite{{{','.join(keys)}}}")

    def _list(self, lines: list[str]) -> str:
        """Items that all have labels make a description list, others a bulleted one."""
        environment = "description" if all(line.startswith("\\item[") for line in lines) else "itemize"
        return "\n".join([f"\\begin{{{environment}}}", *lines, f"\\end{{{environment}}}"])

    def _list_item(self, label, body: str) -> str:
        return (f"\\item[{self.text(label)}] " if label else "\\item ") + body

    def table(self, header: list, columns: str, caption=None, size: str = "small", long: bool = False,
              caller=None) -> Markup:
        """A float (a longtable when `long`, which may break across pages); tabularx to the line width when
        `columns` has Y columns (wrapped, sharing what the others leave)."""
        caption = f"\\caption{{{self.text(caption)}}}" if caption else ""
        columns = _latex_columns(columns)
        rows = ["\\toprule", self.row(*header), "\\midrule", caller().strip(), "\\bottomrule"]
        if long:
            lines = [f"{{\\{size}", f"\\begin{{longtable}}{{{columns}}}", *([caption + "\\\\"] if caption else []),
                     *rows, "\\end{longtable}", "}"]
        else:
            environment = "tabularx" if "Y" in columns else "tabular"
            width = "{\\linewidth}" if environment == "tabularx" else ""
            lines = ["\\begin{table}[htbp]", f"\\centering\\{size}",
                     f"\\begin{{{environment}}}{width}{{{columns}}}", *rows, f"\\end{{{environment}}}",
                     *([caption] if caption else []), "\\end{table}"]
        return _block("\n".join(lines))

    def row(self, *cells) -> Markup:
        return Markup(" & ".join(self.text(cell) for cell in cells) + " \\\\")

    def figure(self, name: str) -> Markup:
        """A float where the figure is first used; every use refers to it, as the float may move."""
        figure = self.figure_uses.use(name)
        see = f"See Figure~\\ref{{fig:{name}}}."
        if not figure["first"]:
            return Markup(see)
        pdf = figure["files"]["pdf"]
        return Markup("\n".join([
            "\\begin{figure}[htbp]",
            "  \\centering",
            f"  \\includegraphics[width=\\linewidth,height=0.42\\textheight,keepaspectratio]{{figures/{pdf}}}",
            f"  \\caption{{{self.text(figure['caption'])} (File: \\texttt{{{self.text('figures/' + pdf)}}}.)}}",
            f"  \\label{{fig:{name}}}",
            "\\end{figure}",
            see]))

    def code_block(self, language: str, lines) -> Markup:
        code = lines if isinstance(lines, str) else "\n".join(lines)
        return Markup(f"\\begin{{verbatim}}\n{code}\n\\end{{verbatim}}")

    def references(self) -> Markup:
        return Markup("\\bibliographystyle{unsrt}\n\\bibliography{references}")


FLAVOURS = {"md": Markdown, "tex": LaTeX}


def _block(text: str) -> Markup:
    """What a helper called as a {% call %} block returns: its text and the line end that jinja's trim_blocks
    removed after {% endcall %}, so that the template's blank lines between blocks come out as written."""
    return Markup(text + "\n")


def _lines(block: str) -> list[str]:
    """A block's non-empty lines, so that blank lines between item() calls keep the template readable."""
    return [line for line in block.splitlines() if line.strip()]


def _columns(spec: str) -> list[str]:
    """The columns of a table's column spec, e.g. 'p{0.4}lr' -> ['p{0.4}', 'l', 'r']."""
    columns = re.findall(r"p\{[0-9.]+\}|[lrY]", spec)
    if "".join(columns) != spec:
        raise ValueError(f"column spec {spec!r}: use l, r, Y and p{{fraction of the line width}}")
    return columns


def _latex_columns(spec: str) -> str:
    """A table's column spec for LaTeX: p{0.4} is 0.4 of the line width; no padding at the table's edges."""
    return "@{}" + "".join(re.sub(r"p\{([0-9.]+)\}", r"p{\1\\linewidth}", column) for column in _columns(spec)) + "@{}"


class _PrintLiteralText(jinja2.ext.Extension):
    """Hands the template's literal text to `finalize`, as if it were written {{ "..." }}, so that prose typed
    straight into templates/sections.j2 is escaped for LaTeX like every printed value."""

    def filter_stream(self, stream):
        for token in stream:
            if token.type == "data":
                yield Token(token.lineno, "variable_begin", "{{")
                yield Token(token.lineno, "string", token.value)
                yield Token(token.lineno, "variable_end", "}}")
            else:
                yield token


def content_environment(flavour: Flavour) -> jinja2.Environment:
    """The jinja environment for templates/sections.j2 in one format: its helpers, the `num` filter, and every
    printed string, literal text included, through the flavour's `text`."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, extensions=[_PrintLiteralText],
                             finalize=flavour.text)
    env.filters["num"] = number
    env.globals.update(flavour.helpers())
    return env


def render_sections(flavour: Flavour, values: dict) -> str:
    """templates/sections.j2 written in one format."""
    return content_environment(flavour).get_template(CONTENT).render(**values).strip()


def render_document(kind: str, body: str) -> str:
    """The document shell of one format around its body."""
    delimiters = dict(block_start_string=r"\BLOCK{", block_end_string="}", variable_start_string=r"\VAR{",
                      variable_end_string="}", comment_start_string=r"\#{", comment_end_string="}") if kind == "tex" else {}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, **delimiters)
    return env.get_template(SHELLS[kind]).render(body=body)


def context(analysis_dir: Path) -> dict:
    facts = json.loads((analysis_dir / "facts.json").read_text())
    bibliography = read_bibliography()
    cff = yaml.safe_load(CITATION_FILE.read_text())
    return {"claims": json.loads((analysis_dir / "verdicts.json").read_text()), **facts,
            "source_note": source_note(facts["setup"]), "bibliography": bibliography,
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
    for kind, flavour in FLAVOURS.items():
        body = render_sections(flavour(values["figures"], values["bibliography"]), values)
        written[kind] = out_dir / f"report.{kind}"
        written[kind].write_text(render_document(kind, body))
    if pdf and (path := build_pdf(out_dir)):
        written["pdf"] = path
    return written


if __name__ == "__main__":
    for path in render(*sys.argv[1:3]).values():
        print(path)
