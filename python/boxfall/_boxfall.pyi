"""Type stubs of the Rust extension module ``boxfall._boxfall``: its names, from the stub
modules of ``boxfall._stubs``, one a subject (tensor, schema, keys, ops, library, namespace,
backends, metrics, graph).

The docstrings are those of the Rust bindings (``src/python/``), so that ``help()`` in an editor
and an IDE's hover show what the module's own ``__doc__`` strings say.

Each ``_stubs/<subject>.pyi`` has a ``.py`` twin that imports the names it describes from the
extension: ``mypy.stubtest`` checks a name re-exported here only in the module that defines it,
which it must import. A name added to a stub is added to its twin (stubtest says "not present
at runtime" where it is not), and a private one (``_name``) here too, as a star import leaves
it out.
"""

# A star import in a stub re-exports the imported module's public names.
# ruff: noqa: F403

from boxfall._stubs.backends import *
from boxfall._stubs.graph import *
from boxfall._stubs.graph import _graph_refusal as _graph_refusal
from boxfall._stubs.graph import _refuse_in_graph as _refuse_in_graph
from boxfall._stubs.keys import *
from boxfall._stubs.library import *
from boxfall._stubs.metrics import *
from boxfall._stubs.namespace import *
from boxfall._stubs.namespace import _make_view as _make_view
from boxfall._stubs.namespace import _output_metas as _output_metas
from boxfall._stubs.namespace import _view_info as _view_info
from boxfall._stubs.ops import *
from boxfall._stubs.schema import *
from boxfall._stubs.tensor import *
