#!/usr/bin/perl

# A connection that closes after its response (Connection: close) lingers
# as nginx's default lingering_close on does: only while the client may
# still be sending. With nothing more from the client it closes at once,
# though the client keeps its end open (stub_status counts it gone); with a
# pipelined request already sent, the server's side shuts down and the
# connection stays until the client ends it, so the bytes it sent do not
# turn into a reset that could cost the client its response.

use warnings;
use strict;

use Test::More;
use IO::Select;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(6);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok"; }
        location = /status { stub_status; }
    }
}

EOF

$t->run();

# Active connections stub_status counts (its own included).
sub active {
	my $r = http_get('/status') // '';
	return $r =~ /Active connections: (\d+)/ ? $1 : -1;
}

# Waits up to $secs for the count to be $want; the last count seen.
sub active_within {
	my ($want, $secs) = @_;
	my $end = time() + $secs;
	my $n;
	while (1) {
		$n = active();
		return $n if $n == $want || time() > $end;
		sleep 0.05;
	}
}

# Everything the server sends until it ends its side (or 3 s pass).
sub read_to_end {
	my ($s) = @_;
	my $sel = IO::Select->new($s);
	my $all = '';
	while ($sel->can_read(3)) {
		my $n = $s->sysread(my $b, 4096);
		last unless $n;
		$all .= $b;
	}
	return $all;
}

# Nothing more from the client: the connection is gone at once, while the
# client still holds its end.
my $s = http(<<EOF, start => 1);
GET / HTTP/1.1
Host: localhost
Connection: close

EOF
like(read_to_end($s), qr/^HTTP\/1.1 200 .*\r\n\r\nok\z/s, 'answered whole');
is(active_within(1, 1), 1, 'closed at once: only the status request is counted');
close $s;

# A request pipelined behind the one that closes: the server shuts its
# side and lingers, reading and dropping, until the client closes.
$s = http(<<EOF, start => 1);
GET / HTTP/1.1
Host: localhost
Connection: close

GET /second HTTP/1.1
Host: localhost

EOF
my $r = read_to_end($s);
like($r, qr/\r\n\r\nok\z/s, 'first answered whole');
unlike($r, qr/second|HTTP\/1.1 200 .*HTTP\/1.1 200/s, 'the pipelined one not answered');
is(active(), 2, 'lingering while the client may still send');
close $s;
is(active_within(1, 1), 1, 'gone once the client closed');
