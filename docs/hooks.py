"""mkdocs hooks (mkdocs.yml's ``hooks:``): the docstrings are written for ``help()`` and Sphinx,
so a role (``:func:`dump```) reaches the API reference as ``:func:`` before the code; it is
dropped, leaving the name in code."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|exc|obj|const):(?=<code)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub("", html)
