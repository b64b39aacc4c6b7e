"""An example of extending hfncl without editing it: a data format (``npz_pairs``), a similarity head
(``bilinear``), a text tower (``bow``) and a label layout (``npz_views``), registered in the
``hfncl.data_formats``, ``hfncl.similarity_heads``, ``hfncl.text_towers`` and ``hfncl.label_layouts`` entry-point
groups."""
