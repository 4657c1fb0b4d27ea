"""Every figure dlperf draws, in one place: matplotlib with the Agg backend, files only.

curves.py: loss-curve fits, regressions and the cluster plan; scaling.py: scaling studies;
staleness.py: the asynchronous-SGD study; roofline.py: `dlperf predict --plot`;
max_batch.py: `dlperf scale max-batch`.
"""
