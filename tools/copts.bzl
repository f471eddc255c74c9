"""Compiler options shared by every dadt C++ target (one place, as Abseil does)."""
DADT_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
]
DADT_TEST_COPTS = DADT_COPTS
