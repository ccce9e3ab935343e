"""Reading and writing Hugging Face safetensors checkpoints with raw dtypes.

numpy has no bfloat16 or float8, so safetensors.numpy cannot hold BF16 / F8_E4M3 tensors; we go
through safetensors' raw (de)serializer instead and keep such tensors as their bit patterns
(uint16 for BF16, uint8 for F8_E4M3). Decoding to numbers is minifloats.py's job.
"""
import json
import os
from dataclasses import dataclass

import numpy as np
import safetensors

# safetensors dtype -> numpy container of the same width (bit patterns for the minifloats).
_CONTAINERS = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "U8": np.uint8, "I8": np.int8,
    "I32": np.int32, "I64": np.int64, "U16": np.uint16, "U32": np.uint32,
}
# The names safetensors' TensorSpec takes for the same dtypes.
_SPEC_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "U8": "uint8", "I8": "int8",
    "I32": "int32", "I64": "int64",
}


@dataclass
class RawTensor:
    dtype: str        # the safetensors dtype name, e.g. "BF16"
    data: np.ndarray  # shaped container (see _CONTAINERS); bit patterns for BF16 / F8


def shard_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return sorted(set(weight_map.values()))
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return ["model.safetensors"]
    files = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no model.safetensors, no index and no *.safetensors")
    return files


def read_file(path):
    with open(path, "rb") as f:
        entries = safetensors.deserialize(f.read())
    out = {}
    for name, entry in entries:
        dtype = entry["dtype"]
        if dtype not in _CONTAINERS:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype}, which the reference does not read")
        data = np.frombuffer(bytes(entry["data"]), _CONTAINERS[dtype]).reshape(entry["shape"])
        out[name] = RawTensor(dtype, data)
    return out


def read_checkpoint(model_dir):
    tensors = {}
    for name in shard_files(model_dir):
        for key, t in read_file(os.path.join(model_dir, name)).items():
            if key in tensors:
                raise ValueError(f"{model_dir}: tensor {key} appears in two shards")
            tensors[key] = t
    return tensors


def write_file(path, tensors):
    """tensors: name -> RawTensor. The arrays must stay alive while serialize_file runs, since
    TensorSpec only holds their addresses."""
    keep = []
    specs = {}
    for name, t in tensors.items():
        # np.require, not ascontiguousarray, which turns a 0-d scale into shape [1].
        arr = np.require(t.data, _CONTAINERS[t.dtype], "C")
        keep.append(arr)
        specs[name] = safetensors.TensorSpec(dtype=_SPEC_NAMES[t.dtype], shape=list(arr.shape),
                                             data_ptr=arr.ctypes.data, data_len=arr.nbytes)
    safetensors.serialize_file(specs, path, {"format": "pt"})
    del keep
    os.chmod(path, 0o644)


def write_checkpoint(model_dir, tensors, shards=1):
    """One model.safetensors, or `shards` files plus model.safetensors.index.json."""
    if shards == 1:
        write_file(os.path.join(model_dir, "model.safetensors"), tensors)
        return
    names = list(tensors)
    total = sum(t.data.nbytes for t in tensors.values())
    weight_map = {}
    per_shard = -(-len(names) // shards)
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s * per_shard:(s + 1) * per_shard]
        write_file(os.path.join(model_dir, file), {n: tensors[n] for n in part})
        weight_map.update({n: file for n in part})
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
