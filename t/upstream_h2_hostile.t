#!/usr/bin/perl

# Hostile HTTP/2 upstreams (proxy_http_version 2 and grpc_pass): a scripted
# backend (Test::Sluice::H2Raw) answers every request with the same raw
# frames. Each bad answer becomes a 502 (504 for silence) with nginx's
# error line, holds the worker's memory bounded, and leaves it serving:
#   - a 10 kB field: past proxy_buffer_size ("upstream sent too big
#     header"), as nginx's grpc module;
#   - an HPACK bomb (a 4 kB field of the dynamic table named 10,000 times
#     over: 40 MB decoded), a name in upper case, a DATA frame on stream 0:
#     "upstream sent invalid HTTP/2";
#   - a GOAWAY that refuses the stream, RST_STREAM REFUSED_STREAM: sent
#     again (the peer never processed it) four times, then 502;
#   - SETTINGS_MAX_CONCURRENT_STREAMS 0 after an answer: the next request
#     goes on a new connection (it waited for a stream for ever);
#   - a Content-Length the DATA frames do not match: the client does not
#     get a whole response;
#   - random answers, mostly well-formed, to 300 requests (seeded;
#     H2_FUZZ_SEED replays, H2_FUZZ_REQUESTS lengthens).

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::H2Raw qw/frame field indexed_field/;
use Test::Sluice::Grpc ();

my $t = Test::Sluice->new()->has(qw/http/)->plan(28);
my $d = $t->testdir();

# The answers, by the stream they answer.
my %answer = (
	good => sub { frame(1, 0x4, $_[0], "\x88" . field('content-length', '2')) . frame(0, 0x1, $_[0], 'ok') },
	bomb => sub { frame(1, 0x5, $_[0], "\x88" . indexed_field('x-bomb', 'b' x 4000) . ("\xbe" x 10000)) },
	big => sub { frame(1, 0x5, $_[0], "\x88" . field('x-big', 'b' x 10240)) },
	upper => sub { frame(1, 0x5, $_[0], "\x88" . field('X-Upper', 'yes')) },
	stream0 => sub { frame(0, 0, 0, 'x') },
	goaway => sub { frame(7, 0, 0, pack('NN', 0, 0)) },
	refused => sub { frame(3, 0, $_[0], pack('N', 7)) },
	short => sub { frame(1, 0x4, $_[0], "\x88" . field('content-length', '10')) . frame(0, 0x1, $_[0], 'abc') },
	silent => sub { '' },
	# Answered, then no stream allowed on the connection any more.
	zero => sub { frame(1, 0x4, $_[0], "\x88" . field('content-length', '2')) . frame(0, 0x1, $_[0], 'ok')
		. frame(4, 0, 0, pack('nN', 3, 0)) },
	fuzz => \&fuzz,
);

# Random answers (a fuzz from the upstream's side, seeded: H2_FUZZ_SEED
# replays it): mostly well-formed answers of random shape (statuses, 1xx
# first, Content-Length right or wrong, DATA frames, trailers), and now and
# then a reset, a GOAWAY, frames of the connection's own (PING, SETTINGS,
# WINDOW_UPDATE) or any frame at all.
my $seed = $ENV{H2_FUZZ_SEED} // int(rand(1 << 31));
srand($seed);
sub fuzz {
	my ($sid) = @_;
	my $rb = sub { join '', map { chr(int(rand(256))) } 1 .. $_[0] };
	my @status = ("\x88", "\x89", "\x8b", "\x8c", "\x8d", "\x8e", "\x08\x03503", "\x08\x03103");
	my $out = '';
	for (1 .. int(rand(3))) {
		my $r = rand();
		$out .= $r < 0.3 ? frame(6, 0, 0, $rb->(8))
			: $r < 0.6 ? frame(8, 0, rand() < 0.5 ? 0 : $sid, pack('N', 1 + int(rand(1 << 16))))
			: $r < 0.8 ? frame(4, 0, 0, pack('nN', 3, int(rand(200))))
			: frame(int(rand(12)), int(rand(256)), int(rand(2)) ? $sid : int(rand(8)), $rb->(int(rand(30))));
	}
	my $r = rand();
	if ($r < 0.1) {
		return $out . frame(3, 0, $sid, pack('N', int(rand(14))));
	} elsif ($r < 0.15) {
		return $out . frame(7, 0, 0, pack('NN', int(rand($sid + 2)), int(rand(14))));
	} elsif ($r < 0.2) {
		return $out . frame(int(rand(12)), int(rand(256)), $sid, $rb->(int(rand(40))));
	}
	$out .= frame(1, 0x4, $sid, "\x08\x03103") if rand() < 0.1;
	my @data = map { $rb->(int(rand(200))) } 1 .. int(rand(4));
	my $len = 0;
	$len += length for @data;
	my $fields = $status[int(rand(@status))];
	$fields .= field('content-length', rand() < 0.8 ? $len : int(rand(500))) if rand() < 0.5;
	$fields .= field('content-type', 'application/grpc') if rand() < 0.3;
	my $trailers = rand() < 0.3;
	if (!@data && !$trailers) {
		return $out . frame(1, 0x5, $sid, $fields);
	}
	$out .= frame(1, 0x4, $sid, $fields);
	for my $i (0 .. $#data) {
		my $last = $i == $#data && !$trailers;
		$out .= frame(0, $last ? 1 : 0, $sid, $data[$i]);
	}
	$out .= frame(1, 0x5, $sid, field('grpc-status', int(rand(17)))) if $trailers;
	return $out;
}
my @names = sort keys %answer;
my %port;
@port{@names} = map { port(8090 + $_) } 0 .. $#names;

my $locations = join "\n", map {
	"        location /$_ { proxy_pass http://127.0.0.1:$port{$_}; proxy_http_version 2;"
		. ($_ eq 'fuzz' ? ' proxy_read_timeout 200ms;' : '')
		. ($_ eq 'zero' ? ' proxy_connect_timeout 3s;' : '') . " }"
} @names;

$t->write_file_expand('sluice.conf', <<"EOF");

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    proxy_read_timeout 1s;
    proxy_next_upstream off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
$locations
        location /ok { return 200 "served"; }
    }
}
EOF

# The ports are held until their servers take them.
Test::Sluice::_release_ports();
for my $n (@names) {
	my $ready = "$d/h2raw_$n.ready";
	$t->run_daemon(\&Test::Sluice::H2Raw::run, $port{$n}, answer => $answer{$n},
		log => "$d/h2raw_$n.log", ready => $ready);
	$t->waitforfile($ready) or die "h2 raw backend $n did not start\n";
}
$t->run();
my $p = port(8080);
my ($w) = $t->worker_pids();

sub rss { rss_kb($w) }

# status and body of a GET through sluice.
sub get {
	my ($path) = @_;
	my $out = `curl -s --max-time 5 -w '\n%{http_code}' http://127.0.0.1:$p$path`;
	my ($body, $code) = $out =~ /^(.*)\n(\d+)$/s;
	return ($code // 0, $body // '');
}

sub served { (get('/ok'))[1] eq 'served' }

my ($code, $body) = get('/good');
is("$code $body", '200 ok', 'a good answer over HTTP/2 (the control)');

{
	my $before = rss();
	($code) = get('/bomb');
	is($code, 502, 'HPACK bomb: 502');
	my $grew = rss() - $before;
	ok($grew < 8192, "HPACK bomb: the worker grew by less than 8 MB ($grew kB)");
	ok($t->waitforlog(qr/\[error\] .*upstream sent invalid HTTP\/2 \(connection error detected: .*\) while reading response header from upstream/),
		'HPACK bomb: logged as the upstream\'s fault');
	ok(served(), 'HPACK bomb: the worker still serves');
}

($code) = get('/big');
is($code, 502, 'a 10 kB field, past proxy_buffer_size: 502');
ok($t->waitforlog(qr/\[error\] .*upstream sent too big header while reading response header from upstream/),
	'a 10 kB field: logged as nginx');

($code) = get('/upper');
is($code, 502, 'a name in upper case: 502');
ok($t->waitforlog(qr/\[error\] .*upstream sent invalid HTTP\/2 .*request: "GET \/upper /),
	'a name in upper case: logged as the upstream\'s fault');

($code) = get('/stream0');
is($code, 502, 'DATA on stream 0: 502');

# Requests the backend named got, as its log counts them.
sub asked { my $l = $t->read_file("h2raw_$_[0].log") // ''; my $n = () = $l =~ /\n/g; $n }

($code) = get('/goaway');
is($code, 502, 'GOAWAY refusing the stream: 502');
# A stream the peer never processed goes again, on a new connection, at
# most four times.
is(asked('goaway'), 5, 'GOAWAY: sent again four times, no more');
ok($t->waitforlog(qr/\[error\] .*upstream sent goaway with error 0 while reading response header from upstream/),
	'GOAWAY: logged as nginx');

($code) = get('/refused');
is($code, 502, 'RST_STREAM REFUSED_STREAM: 502');
is(asked('refused'), 5, 'REFUSED_STREAM: sent again four times, no more');
ok($t->waitforlog(qr/\[error\] .*upstream rejected request with error 7 while reading response header from upstream/),
	'REFUSED_STREAM: logged as nginx');

{
	my $out = `curl -s --max-time 5 -i http://127.0.0.1:$p/short`;
	my $whole = $out =~ /^HTTP\/1.1 200/ && $out =~ /\r\n\r\n(.*)$/s && length($1) == 10;
	ok(!$whole, 'Content-Length 10 over 3 bytes: no whole response')
		or diag($out);
	ok($t->waitforlog(qr/\[error\] .*upstream sent invalid HTTP\/2 \(stream error detected: .*\) while reading upstream, .*request: "GET \/short /),
		'Content-Length 10 over 3 bytes: logged as the upstream\'s fault');
}

{
	my $t0 = time();
	($code) = get('/silent');
	my $took = time() - $t0;
	is($code, 504, 'silence: 504');
	ok($took > 0.8 && $took < 4, "after proxy_read_timeout ($took s)");
}

# A peer that answers and then allows no stream on the connection
# (SETTINGS_MAX_CONCURRENT_STREAMS 0): each next request goes on a new
# connection, at once, and the spent ones close.
{
	my @got = map { (get('/zero'))[0] } 1 .. 3;
	is("@got", '200 200 200', 'no stream allowed after an answer: the next requests are answered');
	my @conns = map { (split)[0] } grep { /\S/ } split /\n/, $t->read_file('h2raw_zero.log');
	is("@conns", '1 2 3', 'each on a new connection');
	# Connections to the peer's port (from sluice's side): the spent ones
	# closed as the next came; the last waits for the next request.
	ok(poll_until(sub { Test::Sluice::Grpc::tcp_established($port{zero}) <= 1 }, 3),
		'the spent connections closed');
}

{
	my $before = rss();
	my $n = $ENV{H2_FUZZ_REQUESTS} // 300;
	# One curl, one connection: each answer's body to /dev/null, its
	# status to the list (the URLs in a config file: there may be many).
	$t->write_file('fuzz.curl', join '', map { "url = \"http://127.0.0.1:$p/fuzz/$_\"\noutput = \"/dev/null\"\n" } 1 .. $n);
	my $secs = 10 + int($n / 4);
	my @codes = split /\n/, `curl -s --max-time $secs -w '%{http_code}\n' -K $d/fuzz.curl`;
	my %seen;
	$seen{$_}++ for @codes;
	is(scalar(grep { $_ > 0 } @codes), $n, "random answers (seed $seed): every request answered");
	ok(scalar(grep { $_ == $w } $t->worker_pids()),
		"random answers (seed $seed): the worker lived ("
		. join(', ', map { "$_ x$seen{$_}" } sort keys %seen) . ')');
	ok(rss() - $before < 16384, "random answers (seed $seed): the worker grew by less than 16 MB ("
		. (rss() - $before) . ' kB)');
}

ok(served(), 'at the end the worker serves');
($code, $body) = get('/good');
is("$code $body", '200 ok', 'and a good upstream still answers');
