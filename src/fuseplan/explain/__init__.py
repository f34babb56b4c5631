"""Stage 4a: the validity GNN and its data (explainers build on it).

Dataset sampling and features need only numpy; the classifier itself needs
the ``gnn`` extra (torch and torch-geometric) and is imported lazily.
"""

from fuseplan.explain.dataset import BUFFERS_KB, FAMILIES, SE_MODELS, GroupSet, build_dataset, load_dataset
from fuseplan.explain.features import FEATURE_VERSION, N_FEATURES, OP_VOCABULARY, group_features

__all__ = ["BUFFERS_KB", "FAMILIES", "FEATURE_VERSION", "GroupSet", "N_FEATURES", "OP_VOCABULARY", "SE_MODELS",
           "build_dataset", "group_features", "load_dataset"]
