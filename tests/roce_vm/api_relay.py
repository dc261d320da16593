# SPDX-License-Identifier: Apache-2.0
"""Relays one TCP connection between stdin/stdout and HOST:PORT: qemu's user-mode network runs
it per guest connection (guestfwd=...-cmd:), so a guest reaches the switch's control API on the
127.0.0.1 of the lab's namespace (lab.py, guest_api=True).

usage: api_relay.py HOST PORT
"""

import os
import socket
import sys
import threading


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    try:
        conn = socket.create_connection((host, port), timeout=10)
    except OSError as e:
        print(f"api_relay: {host}:{port}: {e}", file=sys.stderr)
        return 1
    conn.settimeout(None)

    def upstream() -> None:
        try:
            while data := os.read(0, 65536):
                conn.sendall(data)
        except OSError:
            pass
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    try:
        while data := conn.recv(65536):
            os.write(1, data)
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
