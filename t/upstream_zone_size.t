#!/usr/bin/perl

# Zone sizes: -t refuses what nginx refuses (a size with `g`, which nginx's
# size parser does not know; a zone under 8 pages) and a size the platform
# cannot map, each with FILE:LINE. A big zone costs memory only for what its
# peers use: a 256m zone starts with the master and its workers far below
# 256 MB resident. A reload whose zone cannot be made keeps the running
# generation serving (same workers, requests answered).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(12);
my $d = $t->testdir();

sub conf {
	my ($zone) = @_;
	return <<"EOF";

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    upstream u {
        $zone
        server 127.0.0.1:%%PORT_8081%%;
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://u; }
    }
}

EOF
}

sub test_conf {
	my ($zone) = @_;
	$t->write_file_expand('test.conf', conf($zone));
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'test.conf',
		'-e', 'test.log', '-t');
	return ($rc, $err);
}

my ($rc, $err) = test_conf('zone z 1000g;');
ok($rc == 1 && $err =~ /\[emerg\] .*invalid zone size "1000g" in \Q$d\E\/test\.conf:15$/m,
	'-t refuses zone z 1000g') or diag($err);

($rc, $err) = test_conf('zone z 28k;');
ok($rc == 1 && $err =~ /\[emerg\] .*zone "z" is too small in \Q$d\E\/test\.conf:15$/m,
	'-t refuses a zone under 8 pages') or diag($err);

($rc, $err) = test_conf('zone z 9999999999999999k;');
ok($rc == 1 && $err =~ /\[emerg\] .*invalid zone size "9999999999999999k"/,
	'-t refuses a size past nginx\'s limit') or diag($err);

# About 8 EiB: more than any address space holds (47 or 57 bits).
($rc, $err) = test_conf('zone z 8796093022207m;');
ok($rc == 1 && $err =~ /\[emerg\] .*could not create shared memory zone "z" of 9223372036853727232 bytes: \w+\(\) failed \(\d+: [^)]+\) in \Q$d\E\/test\.conf:15$/m,
	'-t refuses a zone that cannot be mapped') or diag($err);

($rc, $err) = test_conf('zone z 256m;');
is($rc, 0, '-t accepts a 256m zone') or diag($err);

# Resident memory of the master and its workers, in kB: VmRSS counts the
# zone pages each process touched.
sub rss {
	my $kb = 0;
	for my $p ($t->master(), $t->worker_pids()) {
		open my $fh, '<', "/proc/$p/status" or next;
		for (<$fh>) {
			$kb += $1 if /^VmRSS:\s+(\d+)/;
		}
		close $fh;
	}
	return $kb;
}

$t->write_file_expand('sluice.conf', conf('zone z 256m;'));
$t->backend(port(8081));
$t->run();

my @w;
poll_until(sub { @w = $t->worker_pids(); @w == 2 }, 5);
is(scalar @w, 2, 'two workers');
like(http_get('/'), qr/^HTTP\/1\.1 200/, 'a 256m zone serves');
my $rss = rss();
ok($rss > 0 && $rss < 64 * 1024, "master and workers resident well below the zone ($rss kB)");

# A reload whose zone cannot be mapped: [emerg] naming the zone and size,
# the running generation keeps serving.
$t->write_file_expand('sluice.conf', conf('zone z 8796093022207m;'));
$t->signal('HUP');
ok($t->waitforlog(qr/\[emerg\] .*could not create shared memory zone "z" of 9223372036853727232 bytes/),
	'reload: zone that cannot be made refused');
ok(!$t->waitforlog(qr/start worker processes(?s:.*)start worker processes/, 1),
	'reload: no new workers');
is(join(' ', $t->worker_pids()), join(' ', @w), 'reload: same workers');
like(http_get('/'), qr/^HTTP\/1\.1 200/, 'reload: still serving');

$t->expect_errors(qr/could not create shared memory zone "z" of 9223372036853727232 bytes/);
