"""olmax's tests: a package, so a test imports a shared builder by name (tests.train.train_testdata)."""
