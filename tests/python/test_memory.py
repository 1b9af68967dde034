"""Memory that must be given back: entries of closed operators, and the dispatch tables that
registrations replace while another thread is inside a long call."""

from __future__ import annotations

import threading
import uuid

import boxfall as bf
import numpy as np


def rss_mb() -> float:
    """This process's resident memory, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * 4096 / 2**20


def cycle(ns: str, i: int) -> None:
    with bf.Library(f"{ns}_{i}", "DEF") as lib:
        lib.define("f(Tensor x) -> Tensor")
        lib.impl("f", lambda x: x, "CPU")


def test_define_and_close_cycles_with_fresh_names_keep_memory_flat():
    ns = f"mem{uuid.uuid4().hex[:6]}"
    for i in range(2000):  # warm up the allocator and the caches
        cycle(ns, i)
    before = rss_mb()
    for i in range(2000, 22000):
        cycle(ns, i)
    grown = rss_mb() - before
    # Each entry used to stay, ~10 KB a name: 200 MB for these 20,000.
    assert grown < 20, f"{grown:.1f} MB kept by 20,000 closed operators"
    assert not hasattr(getattr(bf.ops, f"{ns}_5"), "f")


def test_namespaces_called_through_bf_ops_and_closed_keep_no_packet_or_overload():
    ns = f"memops{uuid.uuid4().hex[:6]}"
    x = np.ones(2)

    def called(i: int) -> None:
        name = f"{ns}_{i}"
        with bf.Library(name, "DEF") as lib:
            lib.define("f(Tensor x) -> Tensor")
            lib.impl("f", lambda x: x, "CPU")
            assert getattr(bf.ops, name).f(x) is x

    for i in range(500):  # warm up the allocator and the caches
        called(i)
    before = rss_mb()
    n = 4000
    for i in range(500, 500 + n):
        called(i)
    per_namespace_kb = (rss_mb() - before) * 1024 / n
    # Each namespace's packet kept its overload, and the closed operator's entry behind it:
    # ~14 KB a namespace. What stays is bf.ops's attribute and the emptied namespace.
    assert per_namespace_kb < 3, f"{per_namespace_kb:.1f} KB kept by each closed namespace"
    assert not hasattr(getattr(bf.ops, f"{ns}_5"), "f")


def test_a_thread_inside_a_long_python_kernel_holds_back_no_replaced_table():
    ns = f"slow{uuid.uuid4().hex[:6]}"
    entered, release = threading.Event(), threading.Event()

    def slow(x):
        entered.set()
        release.wait(30)  # waits without the GIL, as time.sleep does
        return x

    with bf.Library(ns, "DEF") as lib:
        lib.define("slow(Tensor x) -> Tensor")
        lib.impl("slow", slow, "CPU")
        lib.define("churn(Tensor x) -> Tensor")
        out = []
        t = threading.Thread(target=lambda: out.append(bf.ops.__getattr__(ns).slow(np.ones(2))))
        t.start()
        try:
            assert entered.wait(10)
            for _ in range(500):  # warm up
                with bf.Library(ns, "IMPL") as imp:
                    imp.impl("churn", lambda x: x, "CPU")
            before = rss_mb()
            for _ in range(20000):
                with bf.Library(ns, "IMPL") as imp:
                    imp.impl("churn", lambda x: x, "CPU")
            grown = rss_mb() - before
        finally:
            release.set()
            t.join()
    assert np.array_equal(out[0], np.ones(2))
    # Each cycle retires two tables of ~5 KB: 200 MB if the sleeper held them back.
    assert grown < 20, f"{grown:.1f} MB held back while one call slept"
