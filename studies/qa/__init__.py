"""Knowledge QA and general-capability evaluation: benchmarks, metrics, generation, multiple choice, report."""
