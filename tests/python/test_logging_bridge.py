"""The logging bridge (src/python/logging.rs) leans on CPython's private ``logging.Logger._cache``:
``isEnabledFor`` reads and fills it as a mapping, and every level change (``setLevel`` of any
logger, ``logging.disable``) calls its ``clear``. The bridge puts a dict subclass there whose
``clear`` tells it the levels changed, so that "DEBUG is off for boxfall" is remembered and a
fallback asks Python nothing. These tests fail when a CPython outside those checked runs, or
when ``logging`` stops reading or clearing the cache that way: then the bridge is to be checked
again (and this range widened), before a level change goes unnoticed."""

from __future__ import annotations

import logging
import sys

import boxfall  # noqa: F401  (installs the bridge)
import pytest

# The CPython versions whose logging module was read for the bridge: `_cache` came with 3.7.
CHECKED = ((3, 7), (3, 14))


def test_cpython_is_one_whose_logging_the_bridge_was_checked_against():
    assert sys.implementation.name == "cpython"
    low, high = CHECKED
    assert low <= sys.version_info[:2] <= high, (
        f"Python {sys.version_info[:2]} is outside {CHECKED}: check that logging.Logger."
        "isEnabledFor still reads self._cache and that level changes still call _cache.clear() "
        "(src/python/logging.rs), then widen CHECKED"
    )


class CountingCache(dict):
    clears = 0

    def clear(self):
        type(self).clears += 1
        super().clear()


@pytest.fixture
def counted_logger():
    logger = logging.getLogger("boxfall_test_bridge_private_cache")
    assert isinstance(vars(logger).get("_cache"), dict), "Logger._cache is gone"
    before = logger._cache
    logger._cache = CountingCache()
    CountingCache.clears = 0
    try:
        yield logger
    finally:
        logger._cache = before


def test_is_enabled_for_reads_and_fills_the_private_cache(counted_logger):
    counted_logger._cache[logging.DEBUG] = True
    assert counted_logger.isEnabledFor(logging.DEBUG), "isEnabledFor read no _cache"
    counted_logger._cache.pop(logging.DEBUG)
    counted_logger.isEnabledFor(logging.INFO)
    assert logging.INFO in counted_logger._cache, "isEnabledFor filled no _cache"


def test_a_level_change_anywhere_clears_the_private_cache(counted_logger):
    other = logging.getLogger("boxfall_test_bridge_other")
    level = other.level
    try:
        other.setLevel(logging.ERROR)
    finally:
        other.setLevel(level)
    assert CountingCache.clears >= 1, "setLevel of another logger did not clear _cache"
    clears = CountingCache.clears
    try:
        logging.disable(logging.CRITICAL)
    finally:
        logging.disable(logging.NOTSET)
    assert CountingCache.clears > clears, "logging.disable did not clear _cache"


def test_the_boxfall_logger_holds_the_bridges_level_cache():
    cache = logging.getLogger("boxfall")._cache
    assert type(cache).__name__ == "LevelCache"
    assert type(cache).__module__ == "boxfall._boxfall"
    assert isinstance(cache, dict)
