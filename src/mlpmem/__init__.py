"""mlpmem: retrieval-free parametric memory for causal language models.

Pipeline: corpus -> datastore -> teacher -> memory -> mixed inference -> evaluation.
"""

__version__ = "0.1.0"
