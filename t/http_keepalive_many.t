#!/usr/bin/perl

# Many parked connections at once: 300 keep-alive clients each make a
# request, idle past the parking time (100 ms), then all send again in one
# burst (more than the parker takes from its epoll set per wake-up): every
# one is resumed and answered, in order, on its own connection; then a
# second idle spell and burst.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(3);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
    worker_connections 1024;
}

http {
    access_log off;
    keepalive_timeout 30s;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok $request_uri"; }
    }
}

EOF

$t->run();

my $n = 300;
my @c = map { http('', start => 1) } 1 .. $n;

# Sends GET /$round-$i on every connection, then reads every answer.
sub burst {
	my ($round) = @_;
	$c[$_]->syswrite("GET /$round-$_ HTTP/1.1\r\nHost: localhost\r\n\r\n") for 0 .. $#c;
	my $good = 0;
	for my $i (0 .. $#c) {
		my ($s, $buf) = ($c[$i], '');
		my $sel = IO::Select->new($s);
		while ($sel->can_read(5)) {
			$s->sysread($buf, 4096, length $buf) or last;
			last if $buf =~ /\r\n\r\n/ && $buf =~ /Content-Length: (\d+)/i
				&& length($buf) >= index($buf, "\r\n\r\n") + 4 + $1;
		}
		$good++ if $buf =~ /^HTTP\/1.1 200 .*ok \/$round-$i$/s;
	}
	return $good;
}

is(burst('a'), $n, 'all answered');
select(undef, undef, undef, 0.5);
is(burst('b'), $n, 'all parked, resumed together and answered');
select(undef, undef, undef, 0.5);
is(burst('c'), $n, 'and again');
