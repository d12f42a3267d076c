"""Test corpora that the tests and the benchmarks share, kept out of the product.

Neither `tests` (a benchmark should not import the test suite) nor `bench` (the tests
of the service do not depend on a benchmark) is the place for them, and the installed
package must not ship them: `pyproject.toml` packages only `cameo_actors` and
`spark_ingest`, and an import contract keeps the product from importing this package.

- `bad_input`: bad requests for the service, and `probe`, which sends them and checks
  that a running dataflow came through unharmed.
"""
