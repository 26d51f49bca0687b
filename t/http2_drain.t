#!/usr/bin/perl

# HTTP/2 connections and the worker's life: a reload (HUP) while an h2
# stream is in flight lets it finish on the old generation (GOAWAY, then
# close) while a new connection goes to the new one; an idle connection
# gets GOAWAY after keepalive_timeout; a rapid-reset flood
# (CVE-2023-44487: streams opened and reset at once) ends in GOAWAY
# ENHANCE_YOUR_CALM and the worker goes on serving, as does a CONTINUATION
# flood (a header block that never ends); the HTTP/2 directives' errors
# name file and line. Needs curl with HTTP/2.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::H2 qw/h2_connect h2_request h2_rst h2_frames h2_data_of/;

plan(skip_all => 'no curl with HTTP/2') unless `curl --version 2>/dev/null` =~ /HTTP2/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(21);
my $d = $t->testdir();

my $conf = <<'EOF';

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        http2 on;
        location / { return 200 "GEN"; }
        location /slow/ { proxy_pass http://127.0.0.1:%%PORT_8082%%; }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        http2 on;
        keepalive_timeout 1s;
        location / { return 200 "idle"; }
    }
}
EOF

(my $first = $conf) =~ s/GEN/first/;
$t->write_file_expand('sluice.conf', $first);
$t->backend(port(8082));
$t->run();
my $p = port(8080);

is(`curl -s --http2-prior-knowledge http://127.0.0.1:$p/`, 'first', 'h2c served');
my @old = $t->worker_pids();

# A slow stream in flight across a reload.
open(my $slow, '-|', "curl -s --max-time 20 --http2-prior-knowledge -w ' %{http_code} %{http_version}' http://127.0.0.1:$p/slow/2/x")
	or die "curl: $!\n";
sleep 0.5;
(my $second = $conf) =~ s/GEN/second/;
$t->write_file_expand('sluice.conf', $second);
my $t0 = time();
ok($t->reload(), 'reloaded with a stream in flight');
ok(poll_until(sub { `curl -s --http2-prior-knowledge http://127.0.0.1:$p/` eq 'second' }, 5),
	'a new connection goes to the new generation');
my $got = join '', <$slow>;
close $slow;
like($got, qr/^\d+ \/slow\/2\/x 200 2$/, 'the in-flight stream completed on the old generation');
ok($t->waitforexit(\@old, 10), 'then the old worker exited');

# Two streams in flight on one connection across a reload: the second
# joined the first (it runs in the connection's own task, the first in a
# task of its own); both finish on the old generation, then GOAWAY, then
# the connection closes and the old worker exits.
{
	my $s = h2_connect($p);
	syswrite($s, h2_request(undef, 1, '/slow/2/a') . h2_request(undef, 3, '/slow/2/b'));
	sleep 0.5;
	my @gen2 = $t->worker_pids();
	(my $third = $conf) =~ s/GEN/third/;
	$t->write_file_expand('sluice.conf', $third);
	ok($t->reload(), 'reloaded with two streams of one connection in flight');
	my ($f, $closed) = h2_frames($s, undef, 10);
	my ($one, $two) = (h2_data_of($f, 1), h2_data_of($f, 3));
	ok($one =~ m{^\d+ /slow/2/a$} && $two =~ m{^\d+ /slow/2/b$}
		&& (grep { $_->{type} eq 'GOAWAY' } @$f) && $closed
		&& $t->waitforexit(\@gen2, 10),
		'both answered, GOAWAY, closed, then the old worker exited')
		or diag("1: $one, 3: $two, closed: " . ($closed // 0) . ", frames: " . join(" ", map { "$_->{type}/$_->{sid}" } @$f));
}

# keepalive_timeout closes an idle HTTP/2 connection with GOAWAY.
{
	my $s = h2_connect(port(8081));
	h2_request($s, 1, '/');
	my $t1 = time();
	my ($f, $closed) = h2_frames($s, undef, 6);
	ok((grep { $_->{type} eq 'GOAWAY' } @$f) && $closed, 'idle connection: GOAWAY, then closed');
	my $took = time() - $t1;
	ok($took > 0.8 && $took < 5, "after keepalive_timeout ($took s)");
}

# Rapid reset: 2000 streams opened and reset in one go.
{
	my $s = h2_connect($p);
	my $out = '';
	for my $i (0 .. 1999) {
		my $sid = 2 * $i + 1;
		$out .= h2_request(undef, $sid, '/') . h2_rst(undef, $sid);
	}
	syswrite($s, $out);
	my ($f, $closed) = h2_frames($s, undef, 10);
	my ($ga) = grep { $_->{type} eq 'GOAWAY' } @$f;
	ok($ga, 'a rapid-reset flood gets GOAWAY');
	my $code = $ga ? unpack('N', substr($ga->{payload}, 4, 4)) : -1;
	is($code, 11, 'with ENHANCE_YOUR_CALM');
	ok($closed, 'and the connection closed');
	is(`curl -s --http2-prior-knowledge http://127.0.0.1:$p/`, 'third', 'the worker still serves');
}

# CONTINUATION flood (CVE-2024-27316 and kin): a HEADERS frame without
# END_HEADERS, then CONTINUATION frames that never end the block. h2 takes
# as many as the header limit needs (at least five), then GOAWAY
# ENHANCE_YOUR_CALM; the block is never decoded into a request, so the
# backend sees nothing. Beside it, a block in four frames is answered.
{
	my $block = sub {
		my ($path, $n) = @_;
		my $pad = Test::Sluice::H2::literal('x-pad', 'a' x 100);
		my $out = Test::Sluice::H2::frame(1, 0x1, 1,
			join('', map { Test::Sluice::H2::literal(@$_) } [':method', 'GET'],
				[':scheme', 'http'], [':authority', 'localhost'], [':path', $path]));
		$out .= Test::Sluice::H2::frame(9, $_ == $n ? 0x4 : 0, 1, $pad) for 1 .. $n;
		return $out;
	};
	my $s = h2_connect($p);
	syswrite($s, $block->('/slow/0/four', 3));
	my ($f) = h2_frames($s, sub { $_[0]{type} eq 'DATA' }, 10);
	like(h2_data_of($f, 1), qr{^\d+ /slow/0/four$}, 'a header block in four frames is answered');
	close $s;

	my $floods = $t->log_count(qr/http2 flood detected/);
	my $conns = `curl -s http://127.0.0.1:${\ port(8082)}/conns`;
	$s = h2_connect($p);
	# The block never ends: no END_HEADERS on any of the 2000.
	syswrite($s, $block->('/slow/0/flood', 2001));
	my $closed;
	($f, $closed) = h2_frames($s, undef, 10);
	my ($ga) = grep { $_->{type} eq 'GOAWAY' } @$f;
	my $code = $ga ? unpack('N', substr($ga->{payload}, 4, 4)) : -1;
	ok($code == 11 && $closed && !grep({ $_->{type} eq 'HEADERS' } @$f),
		'a CONTINUATION flood: GOAWAY ENHANCE_YOUR_CALM, no response, closed')
		or diag("GOAWAY code $code, closed " . ($closed // 0) . ", frames: "
			. join(" ", map { "$_->{type}/$_->{sid}" } @$f));
	ok($t->waitforlog(sub { (() = $_[0] =~ /\[info\] .*http2 flood detected/g) > $floods }),
		'logged as a flood');
	is(`curl -s --http2-prior-knowledge http://127.0.0.1:$p/`, 'third', 'the worker still serves');
	is(`curl -s http://127.0.0.1:${\ port(8082)}/conns`, $conns + 1,
		'the backend got no connection but this count\'s');
}

# The directives' errors name file and line.
sub conf_error {
	my ($body) = @_;
	$t->write_file('bad.conf', "events {}\nhttp {\n$body\n}\n");
	my (undef, undef, $err) = $t->run_binary('-t', '-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log');
	return $err;
}
like(conf_error("http2_chunk_size 0;"),
	qr/\[emerg\] "http2_chunk_size" directive value is too small in \S+bad\.conf:3/, 'http2_chunk_size 0');
like(conf_error("server { http2_recv_buffer_size 1m; }"),
	qr/\[emerg\] "http2_recv_buffer_size" directive is not allowed here in \S+bad\.conf:3/, 'http2_recv_buffer_size in server');
like(conf_error("http2_max_field_size 4k; http2_idle_timeout 3m;"),
	qr/\[warn\] the "http2_max_field_size" directive is obsolete, use the "large_client_header_buffers" directive instead in \S+bad\.conf:3/,
	'obsolete http2_max_field_size warns');
