"""Saving and loading parameters, inference models and program bundles for `loom run`."""
import os
import shutil
import tempfile

import numpy as np

from . import core
from .data_loader import DataLoader, PyReader  # noqa: F401
from .reader import (batch, buffered, cache, chain, compose, firstn, map_readers,  # noqa: F401
                     multiprocess_reader, shuffle, xmap_readers)
from .framework import Program, Variable, default_main_program
from .scope import global_scope
from .transpiler import pserver_id, rpc_ops


def _program(main_program):
    return main_program if main_program is not None else default_main_program()


def _combined_path(dirname, filename, what):
    if not isinstance(filename, str) or not filename or os.sep in filename:
        raise ValueError("%s: filename %r must be a plain file name inside dirname"
                         % (what, filename))
    if not dirname:
        raise ValueError("%s: an empty directory name" % what)
    return os.path.join(dirname, filename)


def _save(desc, dirname, filename, what):
    if filename is None:
        core.save_params(desc, global_scope(), dirname)
    else:
        os.makedirs(dirname, exist_ok=True)
        core.save_params_combined(desc, global_scope(), _combined_path(dirname, filename, what))


def _load(desc, dirname, filename, place, what):
    if filename is None:
        core.load_params(desc, global_scope(), dirname, place)
    else:
        core.load_params_combined(desc, global_scope(), _combined_path(dirname, filename, what),
                                  place)


def save_params(executor, dirname, main_program=None, filename=None):
    """Writes every persistable variable (parameters and optimizer state) of the program to
    dirname, one LOOMTNSR file per variable (docs/FORMATS.md). The directory is written beside
    dirname and swapped in whole: an interrupted save leaves the checkpoint saved there before
    (other files in dirname are kept). With filename, all of them go into the one combined file
    dirname/filename instead (Fluid's save_combine: sorted by name; written atomically)."""
    _save(_program(main_program).desc, dirname, filename, "save_params")


def save_persistables(executor, dirname, main_program=None, filename=None):
    """save_params; for a parameter-server trainer's program (call it on trainer 0 between
    steps) every server also saves its blocks and optimizer state to dirname/pserver_<id>,
    atomically (Fluid's checkpoint_notify), and the touched rows of its shard of every
    distributed lookup table (dirname/pserver_<id>/<table>.sptb)."""
    program = _program(main_program)
    rpc = rpc_ops(program)
    if rpc is not None:
        core.ps_checkpoint(rpc[0], rpc[1], rpc[2], os.path.abspath(dirname))
    save_params(executor, dirname, program, filename)


def _checkpoint_dir(checkpoint_dir, what):
    """checkpoint_dir, or the job's (loom launch --checkpoint-dir: LOOM_CHECKPOINT_DIR)."""
    d = checkpoint_dir or os.environ.get("LOOM_CHECKPOINT_DIR", "")
    if not d:
        raise ValueError("%s: no checkpoint directory (pass one, or run under loom launch "
                         "--checkpoint-dir DIR)" % what)
    return d


def checkpoints(checkpoint_dir):
    """The complete checkpoints under checkpoint_dir, [(step, path)] ascending: the step-<N>
    directories holding their CHECKPOINT file (what save_checkpoint and `loom run
    --checkpoint-every` write)."""
    out = []
    if not os.path.isdir(checkpoint_dir):
        return out
    for name in os.listdir(checkpoint_dir):
        if not name.startswith("step-") or not name[5:].isdigit() or int(name[5:]) <= 0:
            continue
        path = os.path.join(checkpoint_dir, name)
        if os.path.isfile(os.path.join(path, "CHECKPOINT")):
            out.append((int(name[5:]), path))
    return sorted(out)


def save_checkpoint(executor, checkpoint_dir, step, main_program=None, max_num_checkpoints=3):
    """Saves the program's persistables (parameters and optimizer state; for a
    parameter-server trainer's program the servers' too, as save_persistables) to
    checkpoint_dir/step-<step>, written whole and swapped in, then removes the oldest complete
    checkpoints beyond max_num_checkpoints. Returns the checkpoint's path. The layout is
    `loom run --checkpoint-every`'s, so either resumes the other's checkpoints. checkpoint_dir
    None: the job's (loom launch --checkpoint-dir)."""
    checkpoint_dir = _checkpoint_dir(checkpoint_dir, "save_checkpoint")
    if not isinstance(step, int) or step <= 0:
        raise ValueError("save_checkpoint: step must be a positive int, got %r" % (step,))
    if not isinstance(max_num_checkpoints, int) or max_num_checkpoints < 1:
        raise ValueError("save_checkpoint: max_num_checkpoints must be >= 1, got %r"
                         % (max_num_checkpoints,))
    path = os.path.join(checkpoint_dir, "step-%d" % step)
    save_persistables(executor, path, main_program)
    done = checkpoints(checkpoint_dir)
    for _, old in done[:max(0, len(done) - max_num_checkpoints)]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def load_latest_checkpoint(executor, checkpoint_dir=None, main_program=None):
    """Loads the newest complete checkpoint of checkpoint_dir into the global scope (as
    load_persistables: a server program takes its pserver_<id> part) and returns its step; 0
    when there is none (start from the beginning). A directory without its CHECKPOINT file (a
    save that was killed) is never taken. checkpoint_dir None: the job's (loom launch
    --checkpoint-dir)."""
    done = checkpoints(_checkpoint_dir(checkpoint_dir, "load_latest_checkpoint"))
    if not done:
        return 0
    step, path = done[-1]
    load_persistables(executor, path, main_program)
    return step


def load_params(executor, dirname, main_program=None, filename=None):
    """Reads what save_params wrote (the combined file dirname/filename when filename is
    given) into the global scope, checking dims and dtypes first."""
    _load(_program(main_program).desc, dirname, filename, executor.place, "load_params")


def load_persistables(executor, dirname, main_program=None, filename=None):
    """load_params; for a parameter server's program (after its startup, before it serves)
    what that server saved to dirname/pserver_<id> (with its shard of every distributed lookup
    table's touched rows, <table>.sptb), so a restarted server resumes."""
    program = _program(main_program)
    sid = pserver_id(program)
    if sid is not None:
        dirname = os.path.join(dirname, "pserver_%d" % sid)
    load_params(executor, dirname, program, filename)
    for table in _distributed_tables(program):  # the server's shard of each table's rows
        path = os.path.join(dirname, table + ".sptb")
        if os.path.exists(path):
            core.load_sparse_table(global_scope(), table, path)


def _distributed_tables(program):
    block = program.desc.block(0)
    for i in range(block.op_size()):
        op = block.op(i)
        if op.type() == "listen_and_serv":
            return list(op.attr("sparse_tables"))
    return []


def _names(vs):
    """Names of a Variable, a name, or a list of either (Fluid accepts all three)."""
    if isinstance(vs, (Variable, str)):
        vs = [vs]
    return [v.name if isinstance(v, Variable) else v for v in vs]


def _write_manifest(dirname, feeds, fetches, batch_size=None, description=None, feed_files=None,
                    model_file=None, params_file=None):
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
    if model_file:
        lines.append('model_file: "%s"' % model_file)
    if params_file:
        lines.append('params_file: "%s"' % params_file)
    tmp = os.path.join(dirname, "bundle.pbtxt.tmp.%d" % os.getpid())
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, os.path.join(dirname, "bundle.pbtxt"))


def _prune_to_targets(program, targets):
    """Removes every op of block 0 that the targets do not depend on (variables stay)."""
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


def _sub_blocks(op):
    """The indices of the blocks an op runs (its block and blocks attributes)."""
    out = []
    for name in op.attr_names():
        kind = op.attr_type(name)
        if kind == "block":
            out.append(int(op.attr(name)))
        elif kind == "blocks":
            out.extend(int(i) for i in op.attr(name))
    return out


def _prune_for_inference(program, feeds, targets):
    """Fluid's _prune_with_input + _inference_optimize on a test-mode clone: keeps the ops of
    block 0 that the targets depend on (the feeds cut the graph: what computes a feed is not
    kept), and only the variables those ops, the sub-blocks they run, the feeds and the targets
    name. Blocks no kept op runs are emptied (block indices stay as they are)."""
    desc = program.desc
    block = desc.block(0)
    needed, cut = set(targets), set(feeds)
    for i in reversed(range(block.op_size())):
        op = block.op(i)
        if (needed - cut).intersection(op.output_arg_names()):
            needed.update(op.input_arg_names())
        else:
            block.remove_op(i)
    reached, todo = {0}, [0]
    used = set(feeds) | set(targets)
    while todo:
        b = desc.block(todo.pop())
        for i in range(b.op_size()):
            op = b.op(i)
            used.update(op.input_arg_names())
            used.update(op.output_arg_names())
            for sub in _sub_blocks(op):
                if sub not in reached:
                    reached.add(sub)
                    todo.append(sub)
    for v in block.all_vars():
        if v.name() not in used:
            block.remove_var(v.name())
    for idx in range(1, desc.num_blocks()):
        if idx not in reached:
            b = desc.block(idx)
            for i in reversed(range(b.op_size())):
                b.remove_op(i)
            for v in b.all_vars():
                b.remove_var(v.name())
    program._version += 1
    return program


def _check_file_name(what, name):
    """model_filename / params_filename: one plain file name inside the model directory."""
    if name is None:
        return None
    if not isinstance(name, str) or not name or os.sep in name or name in (".", ".."):
        raise ValueError("save_inference_model: %s %r must be a plain file name inside the "
                         "model directory" % (what, name))
    if name in ("bundle.pbtxt", "params", "CHECKPOINT"):
        raise ValueError("save_inference_model: %s %r is a name the model directory uses "
                         "itself" % (what, name))
    return name


def save_inference_model(dirname, feeded_var_names, target_vars, executor, main_program=None,
                         model_filename=None, params_filename=None):
    """Saves the inference program that computes target_vars from the feeds (test mode; only
    the ops the targets need, the feeds cutting the graph; only the variables those ops name:
    no label, gradients or optimizer state) as DIR/main.pb (DIR/model_filename when given), the
    parameters it reads under DIR/params (one file per parameter), or, with params_filename,
    all of them in the one file DIR/params_filename (Fluid's save_combine, sorted by name;
    docs/FORMATS.md), and a manifest DIR/bundle.pbtxt naming feeds, fetches and those files.
    The directory is written beside DIR and swapped in whole: an interrupted save leaves the
    model saved there before. Returns the target names."""
    source = _program(main_program)
    block = source.global_block()
    feeds, targets = _names(feeded_var_names), _names(target_vars)
    for name in feeds:
        if not block.has_var(name):
            raise ValueError("save_inference_model: feed '%s' is not a variable of the program"
                             % name)
    for name in targets:
        if not block.has_var(name):
            raise ValueError("save_inference_model: target '%s' is not a variable of the "
                             "program" % name)
    if not dirname:
        raise ValueError("save_inference_model: an empty directory name")
    model_file = _check_file_name("model_filename", model_filename) or "main.pb"
    params_file = _check_file_name("params_filename", params_filename)
    if params_file is not None and params_file == model_file:
        raise ValueError("save_inference_model: model_filename and params_filename are both "
                         "%r" % params_file)
    program = _prune_for_inference(source.clone(for_test=True), feeds, targets)
    tables = _exported_tables(program, source, dirname, params_file)
    # Written whole beside dirname and swapped in: the model saved there before stays loadable
    # until this one is complete (files of the user's in dirname are kept).
    staging = core.stage_directory(dirname)
    try:
        program.desc.save(os.path.join(staging, model_file))
        if params_file is None:
            core.save_params(program.desc, global_scope(), os.path.join(staging, "params"))
        else:
            core.save_params_combined(program.desc, global_scope(),
                                      os.path.join(staging, params_file))
        _write_manifest(staging, feeds, targets,
                        model_file=model_file if model_filename else None,
                        params_file=params_file)
        core.commit_directory(staging, dirname)
    except BaseException:
        core.discard_directory(staging)
        raise
    finally:
        for table in tables:  # the merged rows were in the scope only to be saved
            global_scope().erase_local_var(table)
    # Files of an earlier save in the other layout are carried over by the swap; they would
    # contradict the manifest.
    stale = [os.path.join(dirname, "params")] if params_file is not None else []
    for name in (["main.pb"] if model_filename else []):
        if name != model_file:
            stale.append(os.path.join(dirname, name))
    for path in stale:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.remove(path)
    return targets


# distributed_lookup_table attributes the exported lookup_sparse_table does not take.
_TABLE_ONLY_ATTRS = ("table_name", "height", "width", "dtype", "endpoints", "trainer_id",
                     "fingerprint")


def _exported_tables(program, source, dirname, params_file):
    """Makes the pruned inference program of a parameter-server trainer stand alone: each
    distributed lookup table's rows come from its servers (they write their shards, as for a
    checkpoint, and the shards are merged into a SelectedRows variable of the table's name,
    saved with the parameters), and its distributed_lookup_table op becomes a
    lookup_sparse_table op that serves an id the table never touched the row the servers would
    have made for it. Returns the tables' names (variables put into the global scope)."""
    block = program.desc.block(0)
    ops = [block.op(i) for i in range(block.op_size())
           if block.op(i).type() == "distributed_lookup_table"]
    if not ops:
        return []
    if params_file is not None:
        raise ValueError("save_inference_model: the program reads distributed lookup table "
                         "'%s', which is saved as rows in a params directory: save without "
                         "params_filename" % ops[0].attr("table_name"))
    rpc = rpc_ops(source)
    if rpc is None:
        raise ValueError("save_inference_model: the program has distributed lookup tables but "
                         "no parameter-server ops: pass the transpiled trainer program")
    trainer_id, endpoints, fingerprint = rpc
    parent = os.path.dirname(os.path.abspath(dirname)) or "."
    scratch = tempfile.mkdtemp(prefix=".tables-", dir=parent)
    exported = []
    try:
        core.ps_checkpoint(trainer_id, endpoints, fingerprint, scratch)
        by_table = {}
        for op in ops:
            table = op.attr("table_name")
            if table not in by_table:
                shards = [os.path.join(scratch, "pserver_%d" % i, table + ".sptb")
                          for i in range(len(endpoints))]
                shards = [p for p in shards if os.path.exists(p)]
                if not shards:
                    raise RuntimeError("save_inference_model: no server wrote table '%s' "
                                       "(looked under %s)" % (table, scratch))
                if global_scope().find_var(table) is not None:
                    raise RuntimeError("save_inference_model: the scope already has a variable "
                                       "'%s', the name of the distributed table to export"
                                       % table)
                by_table[table] = core.merge_table_shards(global_scope(), table, shards)
                exported.append(table)
                var = block.var(table)
                var.set_type(core.VarType.SELECTED_ROWS)
                var.set_dtype(core.DataType(op.attr("dtype")))
                var.set_shape([op.attr("height"), op.attr("width")])
                var.set_persistable(True)
            op.set_type("lookup_sparse_table")
            op.set_input("W", [table])
            for name in _TABLE_ONLY_ATTRS:
                if op.has_attr(name):
                    op.remove_attr(name)
            op.set_attr("row_initializer", by_table[table])
    except BaseException:
        for table in exported:
            global_scope().erase_local_var(table)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return exported


def _read_manifest(dirname):
    """(feeds, fetches, {other field: value}) of DIR/bundle.pbtxt."""
    path = os.path.join(dirname, "bundle.pbtxt")
    if not os.path.exists(path):
        raise FileNotFoundError("load_inference_model: %s has no bundle.pbtxt: it was not "
                                "written by save_inference_model" % dirname)
    feeds, fetches, fields = [], [], {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("feeds"):
                feeds.append(line.split('"')[1])
            elif line.startswith("fetches"):
                fetches.append(line.split('"')[1])
            elif line.startswith(("model_file", "params_file")):
                fields[line.split(":")[0]] = line.split('"')[1]
    return feeds, fetches, fields


def load_inference_model(dirname, executor, model_filename=None, params_filename=None):
    """Returns (program, feed names, fetch Variables) of a model save_inference_model wrote
    and loads its parameters into the global scope: from DIR/params, or from the combined file
    DIR/params_filename. model_filename and params_filename must be the names the model was
    saved with (an error says which names it was saved with)."""
    if not os.path.isdir(dirname):
        raise FileNotFoundError("load_inference_model: model directory '%s' does not exist"
                                % dirname)
    core.recover_directory(dirname)  # a save interrupted between its two renames
    feeds, fetches, saved = _read_manifest(dirname)
    model_file = model_filename or "main.pb"
    model_path = os.path.join(dirname, model_file)
    if not os.path.isfile(model_path):
        hint = (" (it was saved with model_filename=%r)" % saved["model_file"]
                if "model_file" in saved else "")
        raise FileNotFoundError("load_inference_model: no model file %s%s"
                                % (model_path, hint))
    program = Program(core.ProgramDesc.load(model_path))
    if params_filename is None:
        if "params_file" in saved:
            raise FileNotFoundError(
                "load_inference_model: %s holds its parameters in the combined file %r; pass "
                "params_filename=%r" % (dirname, saved["params_file"], saved["params_file"]))
        core.load_params(program.desc, global_scope(), os.path.join(dirname, "params"),
                         executor.place)
    else:
        core.load_params_combined(program.desc, global_scope(),
                                  os.path.join(dirname, params_filename), executor.place)
    block = program.global_block()
    return program, feeds, [block.var(n) for n in fetches]


def save_program_bundle(dirname, main_program, startup_program, feeds, fetches, data=None,
                        batch_size=None, description=None):
    """Writes exactly what `loom run DIR` reads: startup.pb, main.pb, bundle.pbtxt and, when
    data maps feed names to numpy arrays, data/<name>.npy."""
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


# ------------------------------------------------------------------ Fluid 1.8's var-level API

def _is_feed_or_fetch(v):
    """Not a dense tensor (feed / fetch lists, communicators, step scopes): nothing to save."""
    return v.desc.type() != core.VarType.DENSE_TENSOR


def get_program_parameter(program):
    """The program's parameters (block 0)."""
    return list(program.global_block().all_parameters())


def get_program_persistable_vars(program):
    """The program's persistable variables of block 0 (parameters and optimizer state)."""
    return [v for v in program.global_block().vars.values() if v.persistable and
            not _is_feed_or_fetch(v)]


def _chosen(program, vars, predicate):
    if vars is None:
        vars = [v for v in program.global_block().vars.values()
                if (predicate(v) if predicate is not None else v.persistable)]
    sub = Program()
    block = sub.global_block()
    for v in vars:
        if not isinstance(v, Variable):
            v = program.global_block().var(v)
        block.create_var(name=v.name, shape=v.shape, dtype=v.dtype, persistable=True)
    return sub


def save_vars(executor, dirname, main_program=None, vars=None, predicate=None, filename=None):
    """Writes the chosen variables (vars, or those of main_program for which predicate holds;
    default: every persistable one) to dirname as save_params does (filename: one combined
    file)."""
    _save(_chosen(_program(main_program), vars, predicate).desc, dirname, filename,
          "save_vars")


def load_vars(executor, dirname, main_program=None, vars=None, predicate=None, filename=None):
    """Reads the chosen variables (as save_vars chooses them) from dirname into the global
    scope, checking dims and dtypes; a failed load changes nothing. filename: the combined file
    save_vars wrote with it."""
    place = executor.place if executor is not None else core.Place.cpu(0)
    _load(_chosen(_program(main_program), vars, predicate).desc, dirname, filename, place,
          "load_vars")


def _is_param(v):
    return isinstance(v, Variable) and v.desc.is_parameter()


def save(program, model_path):
    """Fluid's fluid.save: parameters to model_path.pdparams/, other persistable state
    (optimizer accumulators, learning-rate counters) to model_path.pdopt/, the program to
    model_path.pdmodel (each written atomically)."""
    save_vars(None, model_path + ".pdparams", program, predicate=_is_param)
    save_vars(None, model_path + ".pdopt", program,
              predicate=lambda v: v.persistable and not _is_param(v) and
              not _is_feed_or_fetch(v))
    tmp = model_path + ".pdmodel.tmp.%d" % os.getpid()
    program.desc.save(tmp)
    os.replace(tmp, model_path + ".pdmodel")


def load(program, model_path, executor=None, var_list=None):
    """Fluid's fluid.load: the parameters (and the optimizer state when saved) that fluid.save
    wrote for model_path, into the global scope."""
    load_vars(executor, model_path + ".pdparams", program,
              vars=var_list, predicate=None if var_list else _is_param)
    if var_list is None and os.path.isdir(model_path + ".pdopt"):
        load_vars(executor, model_path + ".pdopt", program,
                  predicate=lambda v: v.persistable and not _is_param(v) and
                  not _is_feed_or_fetch(v))


def load_program_state(model_path, var_list=None):
    """{name: numpy array} of what fluid.save (model_path.pdparams / .pdopt) or save_params
    (the directory model_path) wrote, read through each directory's CHECKPOINT."""
    dirs = [d for d in (model_path + ".pdparams", model_path + ".pdopt") if os.path.isdir(d)]
    if not dirs and os.path.isdir(model_path):
        dirs = [model_path]
    if not dirs:
        raise FileNotFoundError("load_program_state: no %s.pdparams (fluid.save) or %s "
                                "directory (save_params)" % (model_path, model_path))
    wanted = None if var_list is None else {v.name if isinstance(v, Variable) else v
                                            for v in var_list}
    state = {}
    for d in dirs:
        ckpt = os.path.join(d, "CHECKPOINT")
        if not os.path.exists(ckpt):
            raise FileNotFoundError("load_program_state: %s has no CHECKPOINT (an interrupted "
                                    "save?)" % d)
        with open(ckpt) as f:
            lines = f.read().splitlines()
        for line in lines[1:]:
            name, fname = line.split("\t")[:2]
            if wanted is None or name in wanted:
                state[name] = np.array(core.load_tensor(os.path.join(d, fname)))
    return state


def set_program_state(program, state_dict):
    """Sets the program's persistable variables found in state_dict (numpy arrays) in the
    global scope; a shape mismatch is an error naming the variable, before anything is set."""
    todo = []
    for v in get_program_persistable_vars(program):
        if v.name not in state_dict:
            continue
        arr = np.asarray(state_dict[v.name])
        want = [d for d in v.shape]
        if len(want) != arr.ndim or any(w >= 0 and w != a for w, a in zip(want, arr.shape)):
            raise ValueError("set_program_state: '%s' is %s in the state, the program declares "
                             "%s" % (v.name, list(arr.shape), want))
        todo.append((v.name, arr))
    scope = global_scope()
    for name, arr in todo:
        var = scope.find_var(name) or scope.var(name)
        var.get_tensor().set(np.ascontiguousarray(arr), core.Place.cpu(0))
    return [name for name, _ in todo]
