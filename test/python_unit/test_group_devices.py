"""The device check of grouped collectives (dadt.torch.handles.check_same_device), on the CPU:
members on two devices are refused with an error that is a ValueError (dadt's refusals of bad
input) and a RuntimeError (what Horovod scripts catch), naming both members and devices."""
import pytest
import torch

from dadt.common.exceptions import DeviceMismatchError
from dadt.torch.handles import check_same_device


def test_one_device_passes():
    check_same_device([torch.ones(2), torch.zeros(3)], ["g.0", "g.1"])


def test_two_devices_are_refused_naming_both_members():
    tensors = [torch.ones(2), torch.ones(2), torch.ones(2, device="meta")]
    with pytest.raises(DeviceMismatchError) as info:
        check_same_device(tensors, ["g.0", "g.1", "g.2"])
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert "'g.2' is on meta" in message and "'g.0' is on cpu" in message
