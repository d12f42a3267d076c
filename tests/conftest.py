"""The whole suite: hypothesis without wall-clock deadlines (a loaded machine, or two
suites on one, misses any fixed one: a deadline measures the machine, not the code)."""

import os

from hypothesis import settings

settings.register_profile("cameo", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "cameo"))
