"""The browser UI: static pages served at ``/ui/`` and the JSON the Memory page draws."""
