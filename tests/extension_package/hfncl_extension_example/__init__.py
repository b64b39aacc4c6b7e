"""An example of extending hfncl without editing it: a data format (``npz_pairs``), a similarity head
(``bilinear``) and a label layout (``npz_views``), registered in the ``hfncl.data_formats``,
``hfncl.similarity_heads`` and ``hfncl.label_layouts`` entry-point groups."""
