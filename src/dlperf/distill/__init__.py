"""Teacher-student semi-supervised training on pseudo-labels (`dlperf distill`;
docs/distill.md): select.py chooses the pseudo-labelled images, pool.py reads the unlabelled
ones, teacher.py scores them, runner.py runs the stages, summary.py (torch-free) says who won.
"""
