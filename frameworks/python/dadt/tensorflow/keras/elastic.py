"""``horovod.tensorflow.keras.elastic``'s names: dadt.keras.elastic (docs/elastic.md)."""

from dadt.keras.elastic import *  # noqa: F401,F403
from dadt.keras.elastic import __all__  # noqa: F401
