"""torch.tpu streams and events behave as torch.cuda's (docs/streams.md): work is
tagged with the current stream, query/synchronize/events cover exactly that
stream's work, timing events measure device work, and torch.Stream/torch.Event and
torch.accelerator give the same answers."""
import time

import pytest
import torch

import torchtpu

from tpu_testing import assert_same

# Debug eager mode waits for every op (make test-modes runs this file in each mode):
# work is never still running when the test looks.
ASYNC = torchtpu.get_eager_mode() != "debug"


def _heavy(n=512, steps=16, seed=0):
    """A dependent matmul chain (tens of ms on the CPU plugin) and a function that
    computes its CPU reference (call it after looking at the device work)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g) / n**0.5
    x = a.to("tpu")
    for _ in range(steps):
        x = torch.tanh(x @ x)

    def reference():
        ref = a
        for _ in range(steps):
            ref = torch.tanh(ref @ ref)
        return ref

    return x, reference


def test_current_and_default_stream():
    s0 = torch.tpu.current_stream()
    assert isinstance(s0, torch.tpu.Stream) and isinstance(s0, torch.Stream)
    assert s0 == torch.tpu.default_stream() and s0.stream_id == 0
    assert s0.device == torch.device("tpu", 0)
    assert torch.accelerator.current_stream() == s0
    s = torch.tpu.Stream()
    assert s != s0 and s.device_type == s0.device_type
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        assert torch.accelerator.current_stream() == s
        with torch.tpu.stream(None):  # as CUDA: None selects nothing
            assert torch.tpu.current_stream() == s
    assert torch.tpu.current_stream() == s0
    torch.tpu.set_stream(s)
    try:
        assert torch.tpu.current_stream() == s
    finally:
        torch.tpu.set_stream(s0)
    with s:  # torch.Stream's own context manager
        assert torch.tpu.current_stream() == s
    assert torch.tpu.current_stream() == s0


def test_work_goes_to_the_current_stream():
    torch.tpu.synchronize()
    side = torch.tpu.Stream()
    with torch.tpu.stream(side):
        y, ref = _heavy()
    # The default stream has nothing in flight; the side stream is still busy.
    assert torch.tpu.default_stream().query()
    assert side.query() != ASYNC
    side.synchronize()
    assert side.query()
    assert_same(y, ref(), scale=10)


def test_event_covers_work_recorded_before_it():
    torch.tpu.synchronize()
    ev = torch.tpu.Event()
    assert ev.query()  # never recorded: complete, as CUDA
    y, ref = _heavy()
    ev.record()
    assert ev.query() != ASYNC
    ev.synchronize()
    assert ev.query()
    z, _ = _heavy(seed=1)  # recorded work only: later work is not the event's
    assert ev.query()
    torch.tpu.synchronize()
    assert_same(y, ref(), scale=10)


def test_event_is_not_extended_by_later_dependent_work():
    """The in-flight tracker lets an execution that reads the newest entry's output take
    its place; an entry an event captured is never extended, so the event's query stays
    exact while dependent work submitted after it still runs."""
    torch.tpu.synchronize()
    y, ref = _heavy(steps=4)  # 8 executions: one tracker entry that later work could extend
    ev = torch.tpu.Event()
    ev.record()
    ev.synchronize()
    z = y
    for _ in range(8):  # reads y: would take y's entry if the event had not captured it
        z = torch.tanh(z @ z)
    assert ev.query()
    torch.tpu.synchronize()
    expected = ref()
    assert_same(y, expected, scale=10)
    for _ in range(8):
        expected = torch.tanh(expected @ expected)
    assert_same(z, expected, scale=10)


@pytest.mark.skipif(torchtpu.get_eager_mode() != "strict", reason="strict mode's tracker: debug waits per op, fused records")
def test_dependent_chain_pays_one_readiness_query_per_16_ops():
    torch.tpu.synchronize()
    x0 = torch.randn(16, generator=torch.Generator().manual_seed(0))
    x = x0.to("tpu")
    before = torchtpu.metrics()["inflight_queries"]
    for i in range(160):
        x = x.add(1e-3) if i % 2 == 0 else x.mul(0.999)
    chained = torchtpu.metrics()["inflight_queries"] - before
    # Independent ops (each reads only `base`) each stay an entry and are queried once retired.
    before = torchtpu.metrics()["inflight_queries"]
    base = x0.to("tpu")
    independent = [base.add(float(i)) for i in range(64)]
    spread = torchtpu.metrics()["inflight_queries"] - before
    torch.tpu.synchronize()
    assert chained <= 160 // 16 + 2, chained
    assert spread >= 32, spread
    ref = x0
    for i in range(160):
        ref = ref.add(1e-3) if i % 2 == 0 else ref.mul(0.999)
    assert_same(x, ref)
    for i, t in enumerate(independent):
        assert_same(t, x0.add(float(i)))


def test_timing_events_measure_device_work():
    torch.tpu.synchronize()
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    y, _ = _heavy()
    end.record()
    if ASYNC:
        with pytest.raises(RuntimeError, match="completed"):
            start.elapsed_time(end)  # CUDA raises too when the end has not completed
    end.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    ms = start.elapsed_time(end)
    assert 0 < ms <= wall_ms
    # The same events through torch.Event's generic API.
    a, b = torch.Event("tpu", enable_timing=True), torch.Event("tpu", enable_timing=True)
    assert start.elapsed_time(end) == start.event.elapsed_time(end.event)
    a.record()
    y = y @ y
    b.record()
    b.synchronize()
    assert a.elapsed_time(b) >= 0
    plain = torch.tpu.Event()
    plain.record()
    plain.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        start.elapsed_time(plain)


def test_wait_stream_orders_work():
    torch.tpu.synchronize()
    producer, consumer = torch.tpu.Stream(), torch.tpu.Stream()
    with torch.tpu.stream(producer):
        y, ref = _heavy()
    consumer.wait_stream(producer)
    # Whatever the consumer runs next starts after the producer's work.
    assert producer.query()
    with torch.tpu.stream(consumer):
        z = y * 2
    consumer.synchronize()
    assert_same(z, ref() * 2, scale=10)
    ev = producer.record_event()
    assert isinstance(ev, torch.tpu.Event)
    consumer.wait_event(ev)
    assert ev.query()


def test_record_stream_keeps_results_right():
    torch.tpu.synchronize()
    side = torch.tpu.Stream()
    x = torch.randn(256, 256).to("tpu")
    ref = x.cpu() @ x.cpu()
    with torch.tpu.stream(side):
        y = x @ x
    x.record_stream(side)
    del x  # the buffer may not be reused while the side stream reads it
    side.synchronize()
    assert_same(y, ref, scale=10)
    with pytest.raises(RuntimeError):
        torch.randn(2).to("tpu").record_stream(torch.Stream("cpu"))


def test_stream_synchronize_reports_device_side_errors():
    side = torch.tpu.Stream()
    x = torch.arange(4.0, device="tpu")
    index = torch.tensor([7], device="tpu")
    if not ASYNC:  # debug mode checks on the op's line
        with torch.tpu.stream(side), pytest.raises(IndexError, match="out of bounds|out of range"):
            x[index]
        return
    with torch.tpu.stream(side):
        bad = x[index]
    with pytest.raises(IndexError, match="out of bounds|out of range"):
        side.synchronize()
    del bad


def test_interprocess_events_are_refused():
    with pytest.raises(NotImplementedError, match="interprocess"):
        torch.tpu.Event(interprocess=True)


def test_device_capability_and_properties():
    cap = torch.tpu.get_device_capability()
    acc = torch.accelerator.get_device_capability("tpu")
    assert cap["supported_dtypes"] == acc["supported_dtypes"]
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool,
               torch.complex64, torch.uint16, torch.uint32, torch.uint64):
        assert dt in cap["supported_dtypes"]
        torch.zeros(2, dtype=dt, device="tpu")  # what is claimed really allocates
    for dt in (torch.quint8, torch.float8_e4m3fn, torch.complex32):
        assert dt not in cap["supported_dtypes"]
    with pytest.raises(NotImplementedError, match="ComplexHalf is not supported on the tpu device"):
        torch.zeros(2, dtype=torch.complex32).to("tpu")  # unsupported, as PyTorch says it
    assert cap["platform"] == torchtpu._C.platform_name()
    props = torch.tpu.get_device_properties()
    assert props.total_memory == torch.tpu.mem_get_info()[1] > 0
    assert props.name == torch.tpu.get_device_name()


def test_rng_surface():
    torch.tpu.manual_seed(1234)
    assert torch.tpu.initial_seed() == 1234
    torch.tpu.seed()  # a fresh non-deterministic seed, as torch.cuda.seed
    s = torch.tpu.initial_seed()
    assert s != 1234
    states = torch.tpu.get_rng_state_all()
    assert len(states) == torch.tpu.device_count()
    a = torch.rand(4, device="tpu").cpu()
    torch.tpu.set_rng_state_all(states)
    assert torch.equal(torch.rand(4, device="tpu").cpu(), a)
