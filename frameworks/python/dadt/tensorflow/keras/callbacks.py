"""``dadt.tensorflow.keras.callbacks`` (Horovod's ``horovod.tensorflow.keras.callbacks``): the
callbacks of dadt.keras.callbacks."""

from dadt.keras.callbacks import *  # noqa: F401,F403
from dadt.keras.callbacks import __all__  # noqa: F401
