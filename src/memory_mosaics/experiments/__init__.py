"""The Memory Mosaics v2 experiment: data, training, the three questions, the report."""
