/*
 * nmeter: the part of busybox's nmeter applet the node e2e suite uses, for
 * the busybox stand-in (Debian's busybox 1.35 is built without nmeter).
 *
 * The Containers Lifecycle specs time-stamp every line their containers log
 * with `date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z`: busybox's `date` has
 * no sub-second field, nmeter's %Nt prints HH:MM:SS with N decimals. This
 * program prints FORMAT repeatedly, one line every -d MSEC (default 1000;
 * 0 or less: no pause), with busybox's rounding of the fraction. Only %t,
 * %Nt (N 0-6) and %% are supported; any other directive is an error rather
 * than output that would look right and be wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static void usage(void)
{
	fputs("usage: nmeter [-d MSEC] FORMAT   (podunit stand-in: %t, %Nt, %% only)\n", stderr);
	exit(1);
}

/* check FORMAT once, so a bad one fails before anything is printed */
static void check(const char *f)
{
	for (; *f; f++) {
		if (*f != '%')
			continue;
		f++;
		if (*f == '%')
			continue;
		if (*f >= '0' && *f <= '6')
			f++;
		if (*f != 't') {
			fprintf(stderr, "nmeter: unsupported directive in '%s' (podunit stand-in: %%t, %%Nt, %%%% only)\n", f);
			exit(1);
		}
	}
}

static void put_time(const struct timeval *tv, int prec)
{
	unsigned scale = 1, us;
	time_t t = tv->tv_sec;
	struct tm tm;
	int i;

	for (i = prec; i < 6; i++)
		scale *= 10;
	us = (unsigned)tv->tv_usec + scale / 2;
	if (us >= 1000000) {
		t++;
		us -= 1000000;
	}
	localtime_r(&t, &tm);
	printf("%02u:%02u:%02u", tm.tm_hour, tm.tm_min, tm.tm_sec);
	if (prec)
		printf(".%0*u", prec, us / scale);
}

int main(int argc, char **argv)
{
	long delay_ms = 1000;
	const char *f;
	int opt;

	while ((opt = getopt(argc, argv, "d:")) != -1) {
		if (opt != 'd')
			usage();
		delay_ms = strtol(optarg, NULL, 0);
	}
	if (optind != argc - 1)
		usage();
	check(argv[optind]);
	for (;;) {
		struct timeval tv;
		gettimeofday(&tv, NULL);
		for (f = argv[optind]; *f; f++) {
			int prec = 0;
			if (*f != '%') {
				putchar(*f);
				continue;
			}
			f++;
			if (*f == '%') {
				putchar('%');
				continue;
			}
			if (*f >= '0' && *f <= '6')
				prec = *f++ - '0';
			put_time(&tv, prec);
		}
		putchar('\n');
		/* a closed pipe (`| head -n1`) ends it, as SIGPIPE does busybox's */
		if (fflush(stdout) != 0)
			return 0;
		if (delay_ms > 0)
			usleep((useconds_t)delay_ms * 1000);
	}
}
