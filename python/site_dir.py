"""Prints where the pagoda package goes, relative to the install prefix given as argv[1]."""
import os
import sys
import sysconfig

prefix = os.path.abspath(sys.argv[1])
# The interpreter's default site directory (Debian: /usr/local/lib/python3.11/dist-packages),
# when it lies under the prefix: then the installed package needs no PYTHONPATH.
default_site = sysconfig.get_path("platlib")
if default_site.startswith(prefix.rstrip("/") + "/"):
    print(os.path.relpath(default_site, prefix))
else:
    plain = sysconfig.get_path("platlib", "posix_prefix", vars={"platbase": "/", "base": "/"})
    print(plain.lstrip("/"))
