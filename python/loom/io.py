"""Saving and loading parameters, inference models and program bundles for `loom run`."""
import os

from . import core
from .data_loader import DataLoader, PyReader  # noqa: F401
from .reader import (batch, buffered, cache, chain, compose, firstn, map_readers,  # noqa: F401
                     shuffle, xmap_readers)
from .executor import global_scope
from .framework import Program, Variable, default_main_program


def _program(main_program):
    return main_program if main_program is not None else default_main_program()


def save_params(executor, dirname, main_program=None, filename=None):
    """Writes every persistable variable (parameters and optimizer state) of the program to
    dirname, one LOOMTNSR file per variable (docs/FORMATS.md)."""
    core.save_params(_program(main_program).desc, global_scope(), dirname)


def save_persistables(executor, dirname, main_program=None, filename=None):
    """save_params; for a parameter-server trainer's program (call it on trainer 0 between
    steps) every server also saves its blocks and optimizer state to dirname/pserver_<id>,
    atomically (Fluid's checkpoint_notify)."""
    from .transpiler import rpc_ops
    program = _program(main_program)
    rpc = rpc_ops(program)
    if rpc is not None:
        core.ps_checkpoint(rpc[0], rpc[1], rpc[2], os.path.abspath(dirname))
    save_params(executor, dirname, program, filename)


def load_params(executor, dirname, main_program=None, filename=None):
    """Reads what save_params wrote into the global scope, checking dims and dtypes."""
    core.load_params(_program(main_program).desc, global_scope(), dirname, executor.place)


def load_persistables(executor, dirname, main_program=None, filename=None):
    """load_params; for a parameter server's program (after its startup, before it serves)
    what that server saved to dirname/pserver_<id>, so a restarted server resumes."""
    from .transpiler import pserver_id
    program = _program(main_program)
    sid = pserver_id(program)
    if sid is not None:
        dirname = os.path.join(dirname, "pserver_%d" % sid)
    load_params(executor, dirname, program, filename)


def _names(vs):
    return [v.name if isinstance(v, Variable) else v for v in vs]


def _write_manifest(dirname, feeds, fetches, batch_size=None, description=None, feed_files=None):
    lines = []
    for name in feeds:
        f = (feed_files or {}).get(name)
        lines.append('feeds { name: "%s"%s }' % (name, ' file: "%s"' % f if f else ""))
    for name in fetches:
        lines.append('fetches: "%s"' % name)
    if batch_size:
        lines.append("batch_size: %d" % int(batch_size))
    if description:
        lines.append('description: "%s"' % description.replace('"', "'"))
    tmp = os.path.join(dirname, "bundle.pbtxt.tmp.%d" % os.getpid())
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, os.path.join(dirname, "bundle.pbtxt"))


def _prune_to_targets(program, targets):
    """Removes every op of block 0 that the targets do not depend on."""
    block = program.global_block().desc
    needed = set(targets)
    for i in reversed(range(block.op_size())):
        op = block.op(i)
        if needed.intersection(op.output_arg_names()):
            needed.update(op.input_arg_names())
        else:
            block.remove_op(i)
    program._version += 1
    return program


def save_inference_model(dirname, feeded_var_names, target_vars, executor, main_program=None,
                         model_filename=None, params_filename=None):
    """Saves the forward part of the program that computes target_vars (test mode, pruned of
    loss and optimizer ops) as DIR/main.pb, its parameters under DIR/params and a manifest
    naming feeds and fetches."""
    source = _program(main_program)
    block = source.global_block()
    for name in _names(feeded_var_names):
        if not block.has_var(name):
            raise ValueError("save_inference_model: feed '%s' is not a variable of the program"
                             % name)
    for name in _names(target_vars):
        if not block.has_var(name):
            raise ValueError("save_inference_model: target '%s' is not a variable of the "
                             "program" % name)
    if not dirname:
        raise ValueError("save_inference_model: an empty directory name")
    program = _prune_to_targets(source.clone(for_test=True), _names(target_vars))
    os.makedirs(dirname, exist_ok=True)
    program.desc.save(os.path.join(dirname, model_filename or "main.pb"))
    core.save_params(program.desc, global_scope(), os.path.join(dirname, "params"))
    _write_manifest(dirname, _names(feeded_var_names), _names(target_vars))
    return _names(target_vars)


def load_inference_model(dirname, executor, model_filename=None, params_filename=None):
    """Returns (program, feed names, fetch Variables) and loads the parameters."""
    program = Program(core.ProgramDesc.load(os.path.join(dirname, model_filename or "main.pb")))
    core.load_params(program.desc, global_scope(), os.path.join(dirname, "params"), executor.place)
    feeds, fetches = [], []
    with open(os.path.join(dirname, "bundle.pbtxt")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("feeds"):
                feeds.append(line.split('"')[1])
            elif line.startswith("fetches"):
                fetches.append(line.split('"')[1])
    block = program.global_block()
    return program, feeds, [block.var(n) for n in fetches]


def save_program_bundle(dirname, main_program, startup_program, feeds, fetches, data=None,
                        batch_size=None, description=None):
    """Writes exactly what `loom run DIR` reads: startup.pb, main.pb, bundle.pbtxt and, when
    data maps feed names to numpy arrays, data/<name>.npy."""
    import numpy as np
    os.makedirs(dirname, exist_ok=True)
    main_program.desc.save(os.path.join(dirname, "main.pb"))
    startup_program.desc.save(os.path.join(dirname, "startup.pb"))
    files = {}
    if data:
        os.makedirs(os.path.join(dirname, "data"), exist_ok=True)
        for name, arr in data.items():
            rel = os.path.join("data", name.replace("/", "_") + ".npy")
            tmp = os.path.join(dirname, rel + ".tmp.npy")
            np.save(tmp, np.ascontiguousarray(arr))
            os.replace(tmp, os.path.join(dirname, rel))
            files[name] = rel
    _write_manifest(dirname, _names(feeds), _names(fetches), batch_size, description, files)
