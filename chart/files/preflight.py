"""mooncake-pd preflight: runs at the top of every engine start script, before `vllm serve`.

It reads the mounted model's config.json and checks the model, the node and the topology, so that
a values set that cannot start fails in seconds with one line that names the cause, the values
key and the fix, instead of a vLLM or Mooncake traceback after minutes of model loading.

Usage: python3 preflight.py '<JSON settings rendered by the chart>'
  stdout: the --hf-overrides JSON vLLM must get ("" for none): the chart's model.hfOverrides
          plus head_dim derived from the model when config.json lacks it.
  stderr: one summary line, warnings, or the refusal.
  exit 0: go on; exit 78 (EX_CONFIG): refused, before vLLM starts. The refusal is also written
          to the termination log, so `kubectl describe pod` and `mooncake-pd verify` show it.

MOONCAKE_PD_ROOT (empty in pods) is a folder that every absolute path read or written here is
taken relative to, to run the checks against a copy of a node's files (the chart's tests do).
Python 3.8+, standard library only: it runs with the image's own python3.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys

EX_CONFIG = 78
PREFIX = "mooncake-pd preflight:"


class Refusal(Exception):
    """A check failed: what, the values key, and the fix."""

    def __init__(self, what: str, key: str, fix: str):
        super().__init__(f"{PREFIX} {what}, {key}, {fix}")


def host_path(path: str) -> str:
    """A container path under MOONCAKE_PD_ROOT (tests), or as it is (pods)."""
    root = os.environ.get("MOONCAKE_PD_ROOT", "")
    return os.path.join(root, path.lstrip("/")) if root else path


def load_config(model_path: str, key: str) -> dict:
    path = os.path.join(model_path, "config.json")
    try:
        with open(host_path(path)) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise Refusal(
            f"cannot read the model's {path} ({reason})",
            key,
            "point it at a folder holding the model's config.json (check the model volume and model.storage)",
        ) from None
    if not isinstance(config, dict):
        raise Refusal(f"{path} is not a JSON object", key, "mount the model's own config.json")
    return config


def text_config(config: dict) -> tuple[dict, bool]:
    """The language model's settings (vLLM's hf_text_config): text_config of a multimodal
    config, else the config itself; and whether it was nested."""
    nested = config.get("text_config")
    return (nested, True) if isinstance(nested, dict) else (config, False)


def is_mla(text: dict) -> bool:
    """Multi-head latent attention (DeepSeek-V2/V3/R1): kv_lora_rank set."""
    return bool(text.get("kv_lora_rank"))


def head_dim_overrides(config: dict, overrides: dict, key: str) -> tuple[dict, str]:
    """The --hf-overrides to pass, and a note for the summary. head_dim follows the model:
    derived as hidden_size // num_attention_heads (as vLLM's Qwen2 attention computes it) when
    config.json lacks it and the model is not MLA; an explicit value must agree with the model.
    For a multimodal config the override goes under text_config, the nested config vLLM updates
    (vllm/config/model.py _apply_dict_overrides)."""
    text, nested = text_config(config)
    out = json.loads(json.dumps(overrides))
    explicit = out.get("head_dim")
    if nested and isinstance(out.get("text_config"), dict) and "head_dim" in out["text_config"]:
        explicit = out["text_config"]["head_dim"]
    if is_mla(text):
        return out, "MLA model: no head_dim"
    heads, hidden, model_head_dim = text.get("num_attention_heads"), text.get("hidden_size"), text.get("head_dim")
    derived = hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 else None
    wanted = model_head_dim if isinstance(model_head_dim, int) else derived
    if explicit is not None:
        if wanted is not None and explicit != wanted:
            source = "config.json head_dim" if isinstance(model_head_dim, int) else f"{hidden} // {heads}"
            raise Refusal(
                f"head_dim {explicit} disagrees with the model ({wanted} = {source})",
                key,
                "remove it: the preflight derives head_dim from the mounted model",
            )
        return out, f"head_dim {explicit} (set)"
    if isinstance(model_head_dim, int) or derived is None:
        return out, "head_dim from config.json" if isinstance(model_head_dim, int) else "no head_dim"
    if nested:
        out["text_config"] = {**(out.get("text_config") or {}), "head_dim": derived}
    else:
        out["head_dim"] = derived
    return out, f"head_dim {derived} derived ({hidden} // {heads})"


def tensor_parallel_problem(text: dict, tensor: int) -> str:
    """What vLLM refuses of tensor parallel `tensor` for a model's text config, or "": attention
    heads must be divisible by TP; KV heads divisible by TP, or TP by the KV heads when there
    are fewer (they are replicated), except with multi-head latent attention. The one rule:
    `mooncake-pd generate` imports it from this file too."""
    heads = text.get("num_attention_heads")
    if not isinstance(heads, int) or heads <= 0:
        return ""
    if heads % tensor:
        return f"{heads} attention heads are not divisible by tensor parallel {tensor}"
    kv = text.get("num_key_value_heads", heads)
    indivisible = isinstance(kv, int) and kv > 0 and ((kv >= tensor and kv % tensor) or (kv < tensor and tensor % kv))
    if indivisible and not is_mla(text):
        return f"{kv} KV heads and tensor parallel {tensor} do not divide each other"
    return ""


def valid_tensor_parallel(text: dict, limit: int) -> list[int]:
    """The tensor-parallel sizes up to `limit` that tensor_parallel_problem accepts."""
    return [t for t in range(1, limit + 1) if not tensor_parallel_problem(text, t)]


def check_tensor_parallel(text: dict, tensor: int, key: str) -> str:
    heads = text.get("num_attention_heads")
    if not isinstance(heads, int) or heads <= 0:
        return "heads unknown"
    problem = tensor_parallel_problem(text, tensor)
    if problem:
        raise Refusal(problem, key, f"use one of {valid_tensor_parallel(text, min(heads, 64))}")
    return f"TP {tensor} fits {heads} heads / {text.get('num_key_value_heads', heads)} KV heads"


def with_overrides(config: dict, overrides: dict) -> dict:
    """config.json as vLLM reads it after --hf-overrides: each key set whole, a dict into a nested
    config (text_config) key by key (vllm v0.13.0 vllm/config/model.py _apply_dict_overrides
    ~381-396: a nested PretrainedConfig is updated, a dict-valued setting such as rope_scaling
    replaced)."""
    out = dict(config)
    for key, value in overrides.items():
        nested = out.get(key)
        if isinstance(nested, dict) and isinstance(value, dict) and "model_type" in nested:
            out[key] = with_overrides(nested, value)
        else:
            out[key] = value
    return out


# The RoPE types whose factor vLLM does not apply to the derived length ("": no scaling).
UNSCALED_ROPE = frozenset({"", "default", "su", "longrope", "llama3"})


def rope_limit(text: dict) -> tuple[float, str, str, int, object] | None:
    """The longest context vLLM derives from max_position_embeddings and RoPE scaling: (that
    length, the scaling's type, the key whose value is scaled, that value, the factor as the
    config gives it) (vllm v0.13.0 vllm/config/model.py _get_and_verify_max_len ~2114-2140: every
    type but su, longrope and llama3 multiplies by its factor; yarn scales
    original_max_position_embeddings; Gemma 3's length is scaled already). None without
    max_position_embeddings."""
    limit = text.get("max_position_embeddings")
    if not isinstance(limit, int) or isinstance(limit, bool):
        return None
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    if not isinstance(rope, dict) or "gemma3" in str(text.get("model_type", "")):
        return float(limit), "", "max_position_embeddings", limit, 1.0
    kind = str(rope.get("rope_type") or rope.get("type") or "default")
    if kind in UNSCALED_ROPE:
        return float(limit), kind, "max_position_embeddings", limit, 1.0
    base, source = limit, "max_position_embeddings"
    if kind == "yarn" and isinstance(rope.get("original_max_position_embeddings"), int):
        base, source = rope["original_max_position_embeddings"], "original_max_position_embeddings"
    factor = rope.get("factor", 1.0)
    return float(base) * float(factor if isinstance(factor, (int, float)) else 1.0), kind, source, base, factor


def check_max_model_len(text: dict, max_model_len: int, key: str) -> str:
    found = rope_limit(text)
    if found is None:
        return f"max-model-len {max_model_len}"
    limit, kind, source, base, factor = found
    plain = int(text["max_position_embeddings"])
    if max_model_len <= limit:
        scaled = f" ({kind} RoPE scaling allows up to {int(limit)})" if max_model_len > plain else ""
        return f"max-model-len {max_model_len}{scaled}"
    if kind not in UNSCALED_ROPE:
        needed = -(-max_model_len // base)
        raise Refusal(
            f"max-model-len {max_model_len} is above the {int(limit)} tokens the model's {kind} RoPE scaling "
            f"reaches ({source} {base} x factor {factor})",
            key,
            f"set it to at most {int(limit)}, or model.hfOverrides.rope_scaling.factor to {needed} or more",
        )
    raise Refusal(
        f"max-model-len {max_model_len} is above the model's max_position_embeddings {plain}",
        key,
        f"set it to at most {plain}, or extend the context with RoPE scaling in model.hfOverrides.rope_scaling "
        "(the model card says which it supports)",
    )


def check_ports(ports: list[dict], address: str, warnings: list[str]) -> str:
    """Each port this pod binds on the node (host network) is free at the pod's address: a bind
    with SO_REUSEADDR fails only while another socket listens there or on the wildcard address."""
    for entry in ports:
        port = entry["port"]
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise Refusal(
                    f"port {port} is already in use on this node",
                    entry["key"],
                    "choose a free port (see `ss -ltnp` on the node) or keep this role off that node",
                ) from None
            warnings.append(f"{PREFIX} warning: cannot check ports at {address} ({e.strerror}); not checked")
            return "ports not checked"
        finally:
            sock.close()
    return f"{len(ports)} ports free"


def node_ports(settings: dict, worker_index: int) -> list[dict]:
    """The ports this pod binds: serving and DP RPC on entry pods, and the KV side channels of
    its DP ranks (kvPort + global DP rank x per-rank ports + TP rank)."""
    ports = [] if worker_index else list(settings["ports"])
    kv = settings["kvPorts"]
    local = settings["dataLocal"]
    first = kv["start"] + worker_index * local * kv["perRank"]
    ports += [{"port": p, "key": kv["key"]} for p in range(first, first + local * kv["perRank"])]
    return ports


def visible_devices(pattern: str) -> list[int]:
    """Device numbers of /dev/<pattern>N, as the device plugin mounts them into the container."""
    try:
        names = os.listdir(host_path("/dev"))
    except OSError:
        return []
    found = (re.fullmatch(re.escape(pattern) + r"(\d+)", n) for n in names)
    return sorted(int(m.group(1)) for m in found if m)


def check_devices(settings: dict) -> tuple[str, list[int]]:
    devices = visible_devices(settings["devicePattern"])
    wanted = settings["tensor"] * settings["dataLocal"]
    if len(devices) < wanted:
        raise Refusal(
            f"{len(devices)} {settings['devicePattern']} devices visible, tensor x dataLocal needs {wanted}",
            settings["devicesKey"],
            "check the device plugin on this node, or lower tensor or dataLocal",
        )
    return f"{len(devices)} devices visible", devices


def link_status(tool: str, device: int) -> tuple[str, str]:
    """(the link status `hccn_tool -i N -link -g` reports, upper case; "") or ("", why it could
    not tell): a non-zero exit or output without `link status:` is no answer about the link."""
    command = f"hccn_tool -i {device} -link -g"
    try:
        done = subprocess.run(
            [tool, "-i", str(device), "-link", "-g"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return "", f"cannot run {command} ({e})"
    stderr = " ".join(done.stderr.split())[:300] or "no stderr"
    if done.returncode:
        return "", f"{command} exited {done.returncode} ({stderr})"
    status = re.search(r"link status:\s*(\w+)", done.stdout, re.IGNORECASE)
    if not status:
        stdout = " ".join(done.stdout.split())[:200] or "nothing"
        return "", f"{command} printed no 'link status:' (stdout: {stdout}; stderr: {stderr})"
    return status.group(1).upper(), ""


def check_hccn(settings: dict, devices: list[int], warnings: list[str]) -> str:
    """Ascend: hccn.conf present, and with hccn_tool the link of each visible NPU up. The
    check's mode (engine.preflight.checks.hccn): refuse, warn, or off (not called)."""
    refuse = settings["checks"]["hccn"] == "refuse"
    key = "engine.preflight.checks.hccn"

    def fail(what: str, fix: str) -> None:
        if refuse:
            raise Refusal(what, key, fix)
        warnings.append(f"{PREFIX} warning: {what}; KV transfer over the NPUs may fail")

    conf = settings["hccnConf"]
    try:
        with open(host_path(conf)) as f:
            present = bool(f.read().strip())
    except OSError:
        present = False
    if not present:
        fail(f"{conf} (hostFiles.hccnConf) is missing or empty", "configure the NPU network on the node, or set warn")
        return "hccn.conf missing"
    down = []
    for device in devices:
        status, problem = link_status(host_path(settings["hccnTool"]), device)
        if problem:
            # A tool that cannot run (missing driver libraries, no privilege) says nothing about
            # the link: warn whatever the mode, never refuse as if the link were down.
            warnings.append(f"{PREFIX} warning: cannot check NPU links: {problem}; NPU links not checked")
            return "hccn.conf present, links not checked"
        if status != "UP":
            down.append(device)
    if down:
        fail(
            f"NPU link down on device(s) {', '.join(map(str, down))} (hccn_tool -i N -link -g)",
            "bring the links up (hccn_tool), or set warn",
        )
        return "NPU links down"
    return f"hccn.conf present, {len(devices)} NPU links up"


def node_interfaces() -> list[str] | None:
    """The network interfaces the pod sees (the node's, on the host network); None where
    /sys/class/net cannot be read."""
    try:
        return sorted(os.listdir(host_path("/sys/class/net")))
    except OSError:
        return None


def check_interface(settings: dict, env: dict, warnings: list[str]) -> str:
    """The NIC the start script exported for the collective libraries (network.interface, or the
    default route's with auto) exists here: NCCL, HCCL and Gloo otherwise fail at their first
    collective, minutes later, with a socket error that does not name it."""
    names = [name for name in settings.get("interfaceEnv") or [] if env.get(name)]
    if not names:
        return "no NIC variable to check"
    nic = env[names[0]]
    present = node_interfaces()
    if present is None:
        warnings.append(f"{PREFIX} warning: /sys/class/net is not readable; NIC {nic} not checked")
        return f"NIC {nic} not checked"
    if nic not in present:
        auto = settings.get("interface") == "auto"
        raise Refusal(
            f"network interface {nic!r} ({names[0]}{', found from the default route' if auto else ''}) is not on "
            f"this node (it has: {', '.join(present) or 'none visible'})",
            "network.interface",
            "set it to the NIC that carries the pods' traffic (`ip route | grep default` on the node), "
            "or auto for the default route's",
        )
    return f"NIC {nic} present"


# Set by the pod template where accelerator.rdma is on (mooncake-pd.env.rdma): JSON {resource,
# mountInfiniband}, which of the two gives the pod the node's RDMA devices.
RDMA_ENV = "MOONCAKE_PD_RDMA"
CAP_IPC_LOCK = 14  # linux/capability.h


def open_device(path: str) -> OSError | None:
    """Open a device node read-write and close it: the error, or None. The container runtime's
    devices cgroup refuses (EPERM) a device no device plugin gave the container."""
    try:
        os.close(os.open(path, os.O_RDWR))
    except OSError as e:
        return e
    return None


def memlock_note() -> str:
    """Whether this process may pin the memory RDMA registers: CAP_IPC_LOCK in its effective set,
    or RLIMIT_MEMLOCK unlimited (mlock(2), getrlimit(2)); "" where it may or it cannot tell."""
    try:
        with open(host_path("/proc/self/status")) as f:
            status = f.read()
        with open(host_path("/proc/self/limits")) as f:
            limits = f.read()
    except OSError:
        return ""
    cap = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status, re.MULTILINE)
    if cap and int(cap.group(1), 16) >> CAP_IPC_LOCK & 1:
        return ""
    memlock = re.search(r"^Max locked memory\s+(\S+)", limits, re.MULTILINE)
    if not memlock or memlock.group(1) == "unlimited":
        return ""
    return f"no IPC_LOCK capability and a memlock limit of {memlock.group(1)} bytes"


def check_rdma(rdma: dict, warnings: list[str]) -> str:
    """accelerator.rdma on: the node's RDMA devices are in the container (/dev/infiniband with at
    least one uverbs device, the verbs interface NCCL's IB transport and UCX open) and can be
    opened. Without them NCCL and UCX quietly fall back to TCP sockets, which the option exists to
    avoid, so the pod stops here instead."""
    mount = bool(rdma.get("mountInfiniband"))
    resource = rdma.get("resource") or ""
    key = "accelerator.rdma.mountInfiniband" if mount else "accelerator.rdma.resource"
    source = "the node's /dev/infiniband, mounted" if mount else f"the device plugin's {resource}"
    fix = (
        "load the node's RDMA drivers (ls /dev/infiniband on the node), or set accelerator.rdma.enabled false"
        if mount
        else f"check that the RDMA device plugin runs on this node and selects its HCAs (kubectl describe node: "
        f"{resource} allocatable), set accelerator.rdma.resource to the one it offers, "
        "or set accelerator.rdma.enabled false"
    )
    folder = "/dev/infiniband"
    try:
        names = sorted(os.listdir(host_path(folder)))
    except OSError:
        raise Refusal(f"{folder} is missing with accelerator.rdma on (RDMA devices from {source})", key, fix) from None
    verbs = [n for n in names if re.fullmatch(r"uverbs\d+", n)]
    if not verbs:
        raise Refusal(
            f"{folder} has no uverbs device with accelerator.rdma on (it has: {', '.join(names) or 'nothing'})",
            key,
            fix,
        )
    error = open_device(host_path(f"{folder}/{verbs[0]}"))
    if error is not None and error.errno in (errno.EPERM, errno.EACCES):
        raise Refusal(
            f"{folder}/{verbs[0]} cannot be opened ({error.strerror}): the container runtime lets a container open "
            "only the devices a device plugin gave it, or all when privileged",
            key,
            "give the devices through the RDMA device plugin (accelerator.rdma.resource, mountInfiniband false), "
            "or set engine.securityContext.privileged true",
        )
    if error is not None:
        warnings.append(f"{PREFIX} warning: cannot open {folder}/{verbs[0]} ({error.strerror}); not checked further")
    memlock = memlock_note()
    if memlock:
        warnings.append(
            f"{PREFIX} warning: {memlock}: registering memory for RDMA may fail "
            "(accelerator.rdma adds IPC_LOCK; check engine.securityContext and the runtime's memlock limit)"
        )
    return f"RDMA: {len(verbs)} uverbs device{'s' if len(verbs) > 1 else ''} ({', '.join(verbs)})"


# The loader's words for a shared library it cannot find (glibc's dlopen, through Python's
# ImportError): "libibverbs.so.1: cannot open shared object file: No such file or directory".
LIBRARY_MISSING = re.compile(r"([\w.+-]+\.so[\w.]*): cannot open shared object file")
# Importing the transfer engine loads its shared libraries and nothing else: seconds. A minute
# leaves room for a slow node's disk.
IMPORT_TIMEOUT_S = 60


def check_transfer_engine(module: str, key: str, warnings: list[str]) -> str:
    """Import Mooncake's transfer engine as the connector will (`module`, profiles.yaml
    transferEngine), in this image's Python, in a child process: the real loader judges whether
    the node and image have every shared library it needs. A missing one is refused by name."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        warnings.append(f"{PREFIX} warning: importing {module} took over {IMPORT_TIMEOUT_S} s; not judged")
        return f"{module} not judged"
    if proc.returncode == 0:
        return f"{module} loads"
    lines = proc.stderr.strip().splitlines()
    last = lines[-1] if lines else f"exit {proc.returncode}"
    missing = LIBRARY_MISSING.search(proc.stderr)
    if missing:
        raise Refusal(
            f"Mooncake's transfer engine ({module}) cannot load {missing[1]} ({last})",
            key,
            f"run an engine image that carries {missing[1]} (libibverbs.so.1 is rdma-core's libibverbs1, "
            "libnuma.so.1 libnuma1, libcurl.so.4 libcurl4), or choose a connector without Mooncake",
        )
    raise Refusal(
        f"Mooncake's transfer engine ({module}) does not import ({last})",
        key,
        "run an engine image with Mooncake's transfer engine installed, or choose a connector without Mooncake",
    )


def run(settings: dict, env: dict) -> tuple[str, str, list[str]]:
    """(hf-overrides JSON or "", summary line, warnings). Raises Refusal."""
    checks = settings["checks"]
    warnings: list[str] = []
    model_path = env.get("MODEL_LOCATION", "")
    overrides = settings.get("hfOverrides") or {}
    notes = []
    config = load_config(model_path, "model.path") if checks["model"] else None
    if config is not None:
        # The model as vLLM will read it: config.json with model.hfOverrides applied.
        text, _ = text_config(with_overrides(config, overrides))
        overrides, note = head_dim_overrides(config, overrides, "model.hfOverrides.head_dim")
        notes.append(f"model {model_path} ({', '.join(config.get('architectures') or ['?'])}, {note})")
        notes.append(check_tensor_parallel(text, settings["tensor"], settings["tensorKey"]))
        notes.append(check_max_model_len(text, settings["maxModelLen"], "model.maxModelLen"))
    worker_index = int(env.get("WORKER_INDEX") or 0)
    if checks.get("network"):
        notes.append(check_interface(settings, env, warnings))
    if checks["ports"]:
        notes.append(check_ports(node_ports(settings, worker_index), env.get("POD_IP", "0.0.0.0"), warnings))
    devices: list[int] = []
    if checks["devices"]:
        note, devices = check_devices(settings)
        notes.append(note)
    # RDMA between nodes, where accelerator.rdma is on (the pod template says so in RDMA_ENV).
    if checks["devices"] and env.get(RDMA_ENV):
        notes.append(check_rdma(json.loads(env[RDMA_ENV]), warnings))
    # Mooncake's transfer engine, where the connector loads it (settings transferEngine).
    if settings.get("transferEngine"):
        notes.append(check_transfer_engine(settings["transferEngine"], "kvTransfer.connector", warnings))
    # The NPU network check, where the profile mounts hccn.conf (the Ascend ones).
    if "hccnConf" in settings and checks["hccn"] != "off":
        notes.append(check_hccn(settings, devices, warnings))
    summary = f"{PREFIX} ok: {settings['role']}: " + "; ".join(notes)
    return (json.dumps(overrides, separators=(",", ":")) if overrides else ""), summary, warnings


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    settings = json.loads(argv[1])
    try:
        overrides, summary, warnings = run(settings, dict(os.environ))
    except Refusal as refusal:
        message = str(refusal)
        print(message, file=sys.stderr)
        try:
            with open(host_path(settings.get("terminationLog", "/dev/termination-log")), "w") as log:
                log.write(message + "\n")
        except OSError:
            pass
        return EX_CONFIG
    for line in warnings:
        print(line, file=sys.stderr)
    print(summary, file=sys.stderr)
    print(overrides)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
