"""modelswap's benchmark suite (issue 10): `make bench`, or python bench/suite.py --help."""
