"""Geography shared by every stage: how county names are written and compared (``names``), ZIP codes' state and
county (``zips``), great-circle distances (``distance``)."""
