"""OpTest for the Python API: builds a one-layer program with loom.layers, compares its forward
output with a NumPy reference and its gradients (of every input and parameter) with central
finite differences of loss = sum(out * W) for a fixed random W (several outputs: the sum over
them). Gradients come from append_backward, so this checks the layer, the op's shape
inference, kernels, grad maker and grad kernels together, as a user reaches them."""
import numpy as np

import loom as fluid
from loom import core
from loom.framework import dtype_name


class OpTest:
    """inputs: name -> ndarray, fed to data vars of those names (no batch dim added).
    build(**vars) returns the output Variable or a list of them. params: name suffix ->
    ndarray, assigned to the parameters whose names end with that suffix (e.g. "w_0")."""

    def __init__(self, build, inputs, params=None, no_grad=()):
        self.inputs = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
        self.params = dict(params or {})
        self.no_grad = set(no_grad)
        self.main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(self.main, startup), fluid.unique_name.guard():
            feeds = {}
            for name, value in self.inputs.items():
                feeds[name] = fluid.layers.data(
                    name, list(value.shape), append_batch_size=False, dtype=value.dtype.name,
                    stop_gradient=name in self.no_grad or value.dtype.kind != "f")
            out = build(**feeds)
            self.outs = list(out) if isinstance(out, (list, tuple)) else [out]
            terms = []
            for i, o in enumerate(self.outs):
                w = fluid.layers.data("op_test_w%d" % i, list(o.shape), append_batch_size=False,
                                      dtype=o.dtype)
                terms.append(fluid.layers.reduce_sum(fluid.layers.elementwise_mul(o, w)))
            self.loss = fluid.layers.sums(terms) if len(terms) > 1 else terms[0]
            fluid.backward.append_backward(self.loss)
        self.scope = core.Scope()
        self.exe = fluid.Executor(fluid.CPUPlace())
        self.exe.run(startup, scope=self.scope)
        block = self.main.global_block()
        self.param_names = {}
        for p in block.all_parameters():
            for suffix, value in self.params.items():
                if p.name.endswith(suffix):
                    self.param_names[p.name] = suffix
                    self._set_param(p.name, value)

    def _set_param(self, name, value):
        self.scope.find_var(name).get_tensor().set(np.ascontiguousarray(value), fluid.CPUPlace())

    def _run(self, fetch, feeds=None):
        feed = dict(self.inputs if feeds is None else feeds)
        rng = np.random.RandomState(4242)
        for i, o in enumerate(self.outs):
            shape = [int(s) for s in o.shape]
            feed["op_test_w%d" % i] = rng.uniform(0.5, 1.5, shape).astype(dtype_name(o.dtype))
        return self.exe.run(self.main, feed=feed, fetch_list=fetch, scope=self.scope)

    def forward(self):
        """The outputs, as NumPy arrays."""
        return self._run(self.outs)

    def check_forward(self, expected, rtol=1e-7, atol=1e-9):
        got = self.forward()
        expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)

    def _loss(self, feeds):
        return float(np.asarray(self._run([self.loss], feeds)[0]).sum())

    def check_grad(self, eps=1e-6, rtol=1e-6, atol=1e-8):
        """Every float input not in no_grad and every assigned parameter."""
        names = [n for n, v in self.inputs.items() if n not in self.no_grad and v.dtype.kind == "f"]
        names += list(self.param_names)
        analytic = self._run([n + "@GRAD" for n in names])
        for name, got in zip(names, analytic):
            if name in self.inputs:
                base = self.inputs[name]
            else:
                base = np.ascontiguousarray(self.params[self.param_names[name]])
            numeric = np.zeros(base.shape, dtype=np.float64)
            for idx in np.ndindex(*base.shape):
                vals = []
                for delta in (eps, -eps):
                    probe = base.copy()
                    probe[idx] += delta
                    feeds = dict(self.inputs)
                    if name in self.inputs:
                        feeds[name] = probe
                    else:
                        self._set_param(name, probe)
                    vals.append(self._loss(feeds))
                numeric[idx] = (vals[0] - vals[1]) / (2 * eps)
            if name not in self.inputs:
                self._set_param(name, base)
            np.testing.assert_allclose(np.asarray(got), numeric, rtol=rtol, atol=atol,
                                       err_msg="gradient of %s" % name)
