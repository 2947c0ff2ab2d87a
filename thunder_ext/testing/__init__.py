"""Test tools that ship with thunder-ext, apart from the pass itself.

* :mod:`thunder_ext.testing.compare`: the differential harness (a function compiled by
  Thunder against eager PyTorch: outputs, inputs' final state, module state, gradients),
  used by ``thunder_ext.check`` and the main job too;
* :mod:`thunder_ext.testing.gallery`: one program per failure class;
* :mod:`thunder_ext.testing.fuzzing`: a hypothesis strategy of random in-place programs and
  the fuzzer's verdict rule.  It is the only module that imports ``hypothesis`` (a test
  extra), so nothing here imports it eagerly.
"""
