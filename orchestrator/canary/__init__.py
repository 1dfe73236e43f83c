"""The canary model: finding the shipped one or building it, and what its recipe is
(``resolve``); its report through a real engine (``report``)."""
