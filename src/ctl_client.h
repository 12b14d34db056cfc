/*
 * ctl_client.h - zproxy ctl, the client side of the --control socket's
 * commands (the daemon's side: zproxy_ctl.c).
 */
#ifndef ZP_CTL_CLIENT_H
#define ZP_CTL_CLIENT_H

/* Where zproxy ctl looks without --control: the packaged unit's. */
#define ZP_CTL_DEFAULT_PATH	"/run/zproxy/control"

/*
 * zproxy ctl [--control PATH] COMMAND...: argv[0] is "ctl". Returns the
 * exit status: 0 done, 1 not (one line on stderr says why).
 */
int	zp_ctl_main(int argc, char **argv);

#endif
