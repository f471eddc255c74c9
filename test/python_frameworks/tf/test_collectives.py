from cases import *  # noqa: F401,F403 - the shared suite, run on dadt.tensorflow
