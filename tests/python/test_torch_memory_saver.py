"""The torch_memory_saver-shaped facade on simdev: regions are tags, pause drops or keeps each
region's contents as torch_memory_saver would, memory outside regions is left alone, and with
PyTorch present each region allocates from its own memory pool (a stand-in torch here: CI has no
CUDA PyTorch; tests/gpu/tms_example.py checks the real one on the H200)."""
import contextlib
import inspect
import types
import warnings

import pytest

import vmmshim
from vmmshim.torch_memory_saver import TorchMemorySaver, torch_memory_saver

MIB = 1 << 20


@pytest.fixture
def tms():
    return TorchMemorySaver()


def test_code_written_for_torch_memory_saver_finds_the_same_calls():
    for name, params in (("region", ["tag", "enable_cpu_backup"]), ("pause", ["tag"]),
                         ("resume", ["tag"]), ("disable", []), ("cuda_graph", ["cuda_graph"])):
        sig = inspect.signature(getattr(torch_memory_saver, name))
        assert list(sig.parameters)[:len(params)] == params, name
    assert torch_memory_saver.region.__doc__
    assert inspect.signature(torch_memory_saver.pause).parameters["tag"].default is None


def test_regions_pause_and_resume_like_torch_memory_saver(tms, dev, pattern):
    weights, kv, outside = pattern(6 * MIB, 1), pattern(4 * MIB, 2), pattern(2 * MIB, 3)
    with tms.region(tag="weights", enable_cpu_backup=True):
        pw = dev.alloc(len(weights))
    with tms.region(tag="kv_cache"):
        pk = dev.alloc(len(kv))
    po = dev.alloc(len(outside))
    for p, d in ((pw, weights), (pk, kv), (po, outside)):
        dev.write(p, d)
    assert vmmshim.stats("weights+cpu").live_bytes == len(weights)
    assert vmmshim.stats("kv_cache").live_bytes == len(kv)

    tms.pause()
    w, k = vmmshim.stats("weights+cpu"), vmmshim.stats("kv_cache")
    assert w.mapped_bytes == 0 and w.host_backup_bytes >= len(weights)  # kept
    assert k.mapped_bytes == 0 and k.host_backup_bytes == 0             # dropped
    assert vmmshim.stats("default").asleep_bytes == 0
    assert dev.read(po, len(outside)) == outside  # outside every region: untouched, usable
    tms.pause()  # twice: harmless (torch_memory_saver would exit)

    tms.resume()
    tms.resume()
    assert dev.read(pw, len(weights)) == weights
    dev.write(pk, kv)  # dropped contents: the program refills them, as with torch_memory_saver
    assert dev.read(pk, len(kv)) == kv
    for p in (pw, pk, po):
        dev.free(p)


def test_pause_of_one_tag_leaves_the_others_awake(tms, dev, pattern):
    a, b = pattern(2 * MIB, 4), pattern(2 * MIB, 5)
    with tms.region("one", enable_cpu_backup=True):
        pa = dev.alloc(len(a))
    with tms.region("two", enable_cpu_backup=True):
        pb = dev.alloc(len(b))
    dev.write(pa, a)
    dev.write(pb, b)
    tms.pause("one")
    assert vmmshim.stats("one+cpu").mapped_bytes == 0
    assert dev.read(pb, len(b)) == b
    tms.resume("one")
    assert dev.read(pa, len(a)) == a
    tms.pause("never-used")  # a tag without regions: nothing to do
    dev.free(pa)
    dev.free(pb)


def test_one_tag_with_and_without_backup(tms, dev, pattern):
    kept = pattern(2 * MIB, 6)
    with tms.region("mixed", enable_cpu_backup=True):
        pk = dev.alloc(len(kept))
    with tms.region("mixed"):
        pd = dev.alloc(2 * MIB)
    dev.write(pk, kept)
    tms.pause("mixed")
    assert vmmshim.stats("mixed+cpu").host_backup_bytes >= len(kept)
    assert vmmshim.stats("mixed").mapped_bytes == 0
    tms.resume("mixed")
    assert dev.read(pk, len(kept)) == kept
    dev.free(pk)
    dev.free(pd)


def test_disable_inside_a_region(tms, dev):
    with tms.region("r"):
        with tms.disable():
            assert vmmshim.get_tag() == "default"
            p = dev.alloc(MIB)
        assert vmmshim.get_tag() == "r"
    assert vmmshim.stats("r").live_bytes == 0
    dev.free(p)


def test_what_vmmshim_does_not_offer_is_said(tms):
    with pytest.raises(NotImplementedError, match="disk"):
        with tms.region("d", enable_disk_backup=True):
            pass
    with pytest.raises(NotImplementedError):
        tms.get_cpu_backup(object())
    with pytest.raises(NotImplementedError):
        tms.set_disk_backup_dir("/tmp")
    with pytest.warns(UserWarning, match="memory_margin_bytes"):
        tms.memory_margin_bytes = 1 << 30
    tms.hook_mode = "torch"
    assert tms.hook_mode == "torch"
    with pytest.raises(ValueError):
        tms.hook_mode = "nvml"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tms.retain_cpu_backup = True  # what the shim does anyway
    with pytest.raises(TypeError):
        with tms.region(""):
            pass


class FakeCuda:
    """The slice of torch.cuda the facade uses, recording what it is asked."""

    def __init__(self):
        self.pools, self.entered, self.device = [], [], 0

    def is_available(self):
        return True

    def current_device(self):
        return self.device

    def MemPool(self):  # noqa: N802 - torch's name
        pool = types.SimpleNamespace(id=len(self.pools))
        self.pools.append(pool)
        return pool

    @contextlib.contextmanager
    def use_mem_pool(self, pool, device=None):
        self.entered.append((pool.id, device, vmmshim.get_tag()))
        yield


@pytest.fixture
def fake_torch(monkeypatch):
    cuda = FakeCuda()
    monkeypatch.setitem(__import__("sys").modules, "torch", types.SimpleNamespace(cuda=cuda))
    return cuda


def test_with_torch_each_region_has_its_own_pool(tms, fake_torch):
    with tms.region("kv_cache"):
        pass
    with tms.region("kv_cache"):
        pass
    with tms.region("kv_cache", enable_cpu_backup=True):
        pass
    with tms.region("weights"):
        pass
    fake_torch.device = 1
    with tms.region("weights"):
        pass
    with tms.disable():
        pass
    ids = [e[0] for e in fake_torch.entered]
    assert ids == [0, 0, 1, 2, 3, 4], fake_torch.entered
    assert [e[1] for e in fake_torch.entered] == [0, 0, 0, 0, 1, 1]
    # The pool is entered with the region's tag set: segments torch creates there are tagged.
    assert [e[2] for e in fake_torch.entered] == ["kv_cache", "kv_cache", "kv_cache+cpu",
                                                  "weights", "weights", "default"]


def test_without_torch_no_pool_is_made(tms, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    with tms.region("plain"):
        assert vmmshim.get_tag() == "plain"
    assert not tms._pools


def test_without_the_shim_regions_pause_and_resume_do_nothing(tms, dev, pattern, monkeypatch):
    """A program written for torch_memory_saver runs natively too: nothing tagged, nothing
    released, one warning."""
    data = pattern(2 * MIB, 7)
    before = vmmshim.stats().live_bytes
    monkeypatch.setattr(vmmshim, "available", lambda: False)
    assert not tms.enabled
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with tms.region(tag="weights", enable_cpu_backup=True):
            monkeypatch.undo()  # read the thread's tag through the real shim
            assert vmmshim.get_tag() == "default", "no tag was set"
            monkeypatch.setattr(vmmshim, "available", lambda: False)
            p = dev.alloc(len(data))
        dev.write(p, data)
        tms.pause()
        tms.resume()
    monkeypatch.undo()
    assert tms.enabled
    now = vmmshim.stats()
    assert now.asleep_bytes == 0 and now.live_bytes >= before + len(data), "nothing released"
    assert vmmshim.stats("weights+cpu").live_bytes == 0
    assert dev.read(p, len(data)) == data
    assert len([w for w in seen if "not loaded" in str(w.message)]) == 1
    dev.free(p)
