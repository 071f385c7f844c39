"""Paper stage: renders the analysis outputs into the report (Markdown, LaTeX and, with latexmk, PDF)."""
