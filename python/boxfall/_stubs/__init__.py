"""The stubs of the extension ``boxfall._boxfall``, one module a subject (``<subject>.pyi``), which
``_boxfall.pyi`` re-exports, each beside its ``.py`` twin for ``mypy.stubtest``. A regular
package, so that tools that read the sources statically (griffe, which makes the API reference of
the documents' site) find its modules and resolve ``_boxfall.pyi``'s star imports."""
